//! The stream task's side of its consumers: the commands clients send
//! (acks, pull requests, flow control replies) parsed and handed to the
//! replica's live consumers, adding one (resolving its start against the
//! store), the deliveries of `deliveries.rs` published through the shard
//! ([`ShardOutlet`]), what an ack releases, and the consumer API.

use std::rc::Rc;

use bytes::Bytes;

use super::super::api::error::ApiError;
use super::super::consumer::config::{
    self as consumer_config, CreateContext, CreateKind, CreateTarget,
};
use super::super::consumer::requests::{
    self as consumer_requests, AckBody, AckSubject, ConsumersRequest,
};
use super::super::consumer::responses::{
    self as consumer_responses, ConsumerInfoState, PullStatus, SequencePair,
};
use super::super::consumer::{Consumer, ConsumerSpec, Start};
use super::consumer_leader::{last_per_subject, logged_view, Created, Removed, Waiter};
use super::deliveries::{send_statuses_for, xorshift, Outlet};
use super::{now_unix_ns, Retention, Store, StoreError, StreamTask};
use crate::routing::shard_routing::ShardRouting;

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

/// Where the task's deliveries go: its shard's router.
pub(super) struct ShardOutlet(Rc<ShardRouting>);

impl Outlet for ShardOutlet {
    fn interest_generation(&self) -> u64 {
        self.0.interest_generation()
    }

    fn has_interest(&self, subject: &[u8]) -> bool {
        self.0.has_interest(subject)
    }

    fn deliver(
        &mut self,
        inbox: &[u8],
        subject: &[u8],
        reply: Option<&[u8]>,
        header_bytes: usize,
        body: &[u8],
    ) {
        self.0
            .publish_delivery(inbox, subject, reply, header_bytes, body);
    }

    fn publish(&mut self, subject: &[u8], header_bytes: usize, body: &[u8]) {
        self.0.publish_internal(subject, header_bytes, body);
    }
}

impl StreamTask {
    pub(super) fn outlet(&self) -> ShardOutlet {
        ShardOutlet(self.js.shard().routing.clone())
    }

    /// Seeds the tags of advisories and flow control requests.
    fn seed(&self, now_ns: u64) -> u64 {
        now_ns ^ (self.core.group << 17)
    }

    /// A parsed MSG.NEXT (or `+NXT`) body for `name`, answered on `reply`.
    fn pull_request(
        &mut self,
        name: &str,
        reply: Bytes,
        parsed: Result<consumer_requests::PullRequest, PullStatus>,
    ) {
        let mut outlet = self.outlet();
        self.core
            .replica
            .consumers
            .pull(&mut outlet, name, reply, parsed, now_unix_ns());
    }

    /// A reply to a flow control request (`$JS.FC.<stream>.<consumer>.<id>`).
    fn flow_control_reply(&mut self, subject: &[u8]) {
        self.core.replica.consumers.flow_control_replied(subject);
    }

    /// Runs every consumer's timers due at `now_ns`; deletes those
    /// inactive past their threshold (a durable through the log).
    pub(super) fn consumer_timers(&mut self, now_ns: u64) {
        let mut outlet = self.outlet();
        let inactive = self.core.replica.run_timers(&mut outlet, now_ns);
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

    /// The earliest consumer timer.
    pub(super) fn consumers_wake_at_ns(&self) -> Option<u64> {
        self.core.replica.consumers.wake_at_ns()
    }

    /// The interest generation push consumers with messages but no
    /// subscriber were last checked at (`None`: none waits for one).
    pub(super) fn awaiting_interest_since(&self) -> Option<u64> {
        self.core.replica.consumers.awaiting_interest_since()
    }

    /// Serves waiting pull requests and active push consumers; what went
    /// to consumers that take no acks may leave an interest stream.
    pub(super) async fn deliver_to_consumers(&mut self) -> Result<(), StoreError> {
        let mut outlet = self.outlet();
        let max_payload_bytes = self.js.shard().limits.max_payload_bytes as u64;
        // One clock read per turn: a turn is at most a batch's worth.
        let now_ns = now_unix_ns();
        let seed = self.seed(now_ns);
        let delivered = self
            .core
            .replica
            .deliver(&mut outlet, max_payload_bytes, seed, now_ns)
            .await?;
        self.serving.deliveries_pending = delivered.budget_spent;
        if self.core.replica.state.config.retention != Retention::Limits {
            for sequence in delivered.unacknowledged {
                self.release(sequence, None);
            }
        }
        Ok(())
    }

    /// Publishes `name`'s queued advisories (`reason`: a term's).
    pub(super) fn publish_events(&mut self, name: &str, reason: Option<&str>) {
        // Most acks raise none: no clock read, no outlet.
        let has_events = self
            .core
            .replica
            .consumers
            .get(name)
            .is_some_and(|consumer| consumer.delivery.has_events());
        if !has_events {
            return;
        }
        let mut outlet = self.outlet();
        let now_ns = now_unix_ns();
        let seed = self.seed(now_ns);
        self.core.replica.consumers.publish_events(
            &mut outlet,
            &self.handle.name,
            name,
            reason,
            seed,
            now_ns,
        );
    }

    /// Publishes every consumer's queued advisories.
    pub(super) fn publish_all_events(&mut self) {
        let mut outlet = self.outlet();
        let now_ns = now_unix_ns();
        let seed = self.seed(now_ns);
        self.core.replica.consumers.publish_all_events(
            &mut outlet,
            &self.handle.name,
            seed,
            now_ns,
        );
    }

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
                if !self.core.replica.consumers.contains(ack.consumer) {
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
                if !self.core.replica.consumers.contains(&consumer) {
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
        let replica = &mut self.core.replica;
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
        let store = &self.core.replica.state.store;
        let state = with_store!(store, log => log.state());
        let last_sequence = with_store!(store, log => log.last_sequence());
        let probe = Consumer::new(name.to_string(), config.clone(), spec.clone(), 0, 1, 0);
        match spec.start {
            Start::All => state.first_sequence.max(1),
            Start::New => self.core.replica.leader.last_sequence.max(last_sequence) + 1,
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
        let Some((floor, term_reason)) = self.core.replica.consumers.acknowledge(
            name,
            stream_sequence,
            consumer_sequence,
            request,
            now_ns,
        ) else {
            return;
        };
        self.publish_events(name, term_reason.as_deref());
        if acknowledging && self.core.replica.state.config.retention != Retention::Limits {
            self.release(stream_sequence, floor.moved());
        }
        // Double ack: an empty message once it is processed (for a
        // durable, once a snapshot holding it applied).
        if let Some(reply) = reply {
            self.answer_ack(name, reply);
        }
    }

    /// Removes a consumer kept in memory only.
    pub(super) fn remove_consumer(&mut self, name: &str) -> bool {
        let Some(removed) = self.core.replica.consumers.remove(name) else {
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
        send_statuses_for(&mut self.outlet(), &consumer, closed);
        self.release_after_removal(consumer.delivery.ack_floor().1);
    }

    /// Interest and work-queue retention: the removals no consumer needs
    /// any more ([`Leader::release`]).
    pub(super) fn release(
        &mut self,
        sequence: u64,
        floor_moved: Option<std::ops::RangeInclusive<u64>>,
    ) {
        let replica = &mut self.core.replica;
        self.groups.with_node(self.core.group, |node| {
            replica.release(node, sequence, floor_moved)
        });
    }

    /// An interest stream lost a consumer: messages only it needed go.
    fn release_after_removal(&mut self, floor_stream: u64) {
        if self.core.replica.state.config.retention != Retention::Interest {
            return;
        }
        let last = with_store!(&self.core.replica.state.store, log => log.last_sequence());
        if let Some(first) = with_store!(&self.core.replica.state.store, log => log.next_matching(floor_stream + 1, |_| true))
        {
            self.release(first, Some(first..=last));
        }
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
        let kind = consumer_response_kind(tokens);
        if let ["INFO", _, name] = tokens {
            // As nats-server's info: requests nobody listens to don't count.
            let outlet = self.outlet();
            self.core
                .replica
                .consumers
                .drop_uninterested_requests(&outlet, name);
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
            ["INFO", _, name] => match self.core.replica.consumers.get(name) {
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
        let names: Vec<String> = self.core.replica.consumers.names().cloned().collect();
        let total = names.len();
        if !list {
            let page = consumer_responses::page_of(names, offset, consumer_responses::NAMES_LIMIT);
            return consumer_responses::consumer_names_response(total, offset, &page);
        }
        let page = consumer_responses::page_of(names, offset, consumer_responses::LIST_LIMIT);
        let infos: Vec<String> = page
            .iter()
            .filter_map(|name| self.core.replica.consumers.get(name))
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
            .core
            .replica
            .consumers
            .iter()
            .map(|(name, consumer)| (name.clone(), consumer.config.clone()))
            .collect();
        let pairs: Vec<(&str, &consumer_config::ConsumerConfig)> = existing
            .iter()
            .map(|(name, config)| (name.as_str(), config))
            .collect();
        let mut random = xorshift(now_unix_ns() ^ (self.core.group << 17));
        let config = self.core.replica.state.config.clone();
        let outcome = consumer_config::parse_create(
            target,
            payload,
            CreateContext {
                stream: Some(&config),
                consumers: &pairs,
                random: &mut random,
                clustered: self.js.is_clustered(),
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
                self.core.replica.consumers.update(
                    &outcome.name,
                    outcome.config,
                    spec,
                    now_unix_ns(),
                );
            }
        }
        let consumer = self
            .core
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
        let state = with_store!(&self.core.replica.state.store, log => log.state());
        let last_sequence = with_store!(&self.core.replica.state.store, log => log.last_sequence());
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
            // A consumer is led by its stream's leader (it rides in the
            // stream's log): in a cluster its block is the stream's. On
            // one server nats-server shows none.
            cluster: self.js.is_clustered().then(|| self.cluster_block()),
            push_bound: consumer
                .spec
                .push
                .as_ref()
                .is_some_and(|spec| self.js.shard().routing.has_interest(&spec.deliver_subject)),
            ..ConsumerInfoState::default()
        }
    }

    /// `/jsz`'s `consumer_detail` of this replica, by name (config only
    /// when `config`). In office: its live consumers, each as a
    /// CONSUMER.LIST element. Otherwise the durables its log holds, at
    /// their last applied state, as a nats-server follower reports its
    /// consumer replicas: delivered, ack floor and the pending and
    /// redelivered counts of that state, no waiting requests and
    /// `num_pending` 0 (a follower does not count it), no `last_active`
    /// (not in the log), the `cluster` block as this replica sees it.
    pub(super) fn consumer_details(&self, config: bool) -> Vec<super::ConsumerDetail> {
        let now_ns = now_unix_ns();
        let stream = &self.handle.name;
        if self.core.replica.in_office() {
            return self
                .core
                .replica
                .consumers
                .values()
                .take(super::CONSUMER_DETAILS_MAX)
                .map(|consumer| super::ConsumerDetail {
                    name: consumer.name.clone(),
                    json: consumer_responses::consumer_detail_object(
                        stream,
                        &consumer.name,
                        config.then_some(&consumer.config),
                        consumer.created_unix_ns,
                        &self.consumer_state(consumer),
                        now_ns,
                    ),
                    logged: self.is_logged(&consumer.name),
                })
                .collect();
        }
        let cluster = self.js.is_clustered().then(|| self.cluster_block());
        self.core
            .replica
            .state
            .logged_consumers
            .iter()
            .take(super::CONSUMER_DETAILS_MAX)
            // One its build cannot read stays out (a leader would not run
            // it either).
            .filter_map(|(name, logged)| Some((name, logged, logged_view(name, logged).ok()?)))
            .map(|(name, logged, (consumer_config, delivery))| {
                let (delivered_consumer, delivered_stream) = delivery.delivered();
                let (floor_consumer, floor_stream) = delivery.ack_floor();
                let state = ConsumerInfoState {
                    delivered: SequencePair {
                        consumer_sequence: delivered_consumer,
                        stream_sequence: delivered_stream,
                        last_active_unix_ns: None,
                    },
                    ack_floor: SequencePair {
                        consumer_sequence: floor_consumer,
                        stream_sequence: floor_stream,
                        last_active_unix_ns: None,
                    },
                    num_ack_pending: delivery.num_ack_pending() as u64,
                    num_redelivered: delivery.num_redelivered() as u64,
                    cluster: cluster.clone(),
                    ..ConsumerInfoState::default()
                };
                super::ConsumerDetail {
                    name: name.clone(),
                    json: consumer_responses::consumer_detail_object(
                        stream,
                        name,
                        config.then_some(&consumer_config),
                        logged.created_unix_ns,
                        &state,
                        now_ns,
                    ),
                    logged: true,
                }
            })
            .collect()
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
}

/// The response type of a `$JS.API.CONSUMER.…` request; `tokens` follow
/// `CONSUMER.`.
pub(super) fn consumer_response_kind(tokens: &[&str]) -> &'static str {
    match tokens.first() {
        Some(&"INFO") => "consumer_info_response",
        Some(&"DELETE") => "consumer_delete_response",
        Some(&"NAMES") => "consumer_names_response",
        Some(&"LIST") => "consumer_list_response",
        _ => "consumer_create_response",
    }
}
