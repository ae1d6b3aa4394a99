//! The stream task's side of its consumers: adding one (resolving its
//! start and pending count against the store), the delivery loop that
//! serves waiting pull requests, new messages raising `num_pending`, acks,
//! and the consumers' timers. A child of `stream` so it works on the task's
//! own state.

use bytes::Bytes;

use super::super::consumer::{ack_subject, headers_only, Consumer, ConsumerSpec, Start};
use super::super::delivery::Next;
use super::super::pull::{PullRequest, Reply, Status};
use super::{now_unix_ns, Store, StoreError, StreamTask};

/// Deliveries one turn makes across the stream's consumers at most, so
/// publishes and acks get their turn.
pub const DELIVERIES_PER_TURN_MAX: usize = 1024;

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
    /// `+TERM`.
    Term,
}

impl StreamTask {
    pub(super) fn consumer_command(&mut self, command: ConsumerCommand) {
        match command {
            ConsumerCommand::Ack {
                subject,
                body,
                reply,
            } => {
                let Some(ack) = parse_ack_subject(&subject) else {
                    return;
                };
                let request = match &body[..] {
                    b"" | b"+ACK" | b"+OK" => AckRequest::Ack,
                    b"+WPI" => AckRequest::Progress,
                    body if body.starts_with(b"+TERM") => AckRequest::Term,
                    body if body.starts_with(b"-NAK") => AckRequest::Nak { delay_ns: None },
                    _ => AckRequest::Ack,
                };
                self.consumer_ack(
                    &ack.consumer,
                    ack.stream_sequence,
                    ack.consumer_sequence,
                    request,
                    reply,
                );
            }
            ConsumerCommand::Next {
                consumer,
                reply,
                payload,
            } => {
                let Some(reply) = reply else {
                    return;
                };
                if !self.consumers.contains_key(&consumer) {
                    return self.js.no_responders(Some(reply));
                }
                let _ = payload;
                let request = PullRequest {
                    reply,
                    batch: 1,
                    max_bytes: 0,
                    expires_at_ns: None,
                    no_wait: false,
                    heartbeat_ns: 0,
                };
                self.consumer_pull(&consumer, request);
            }
        }
    }

    /// Adds a consumer: resolves where it starts and how many matching
    /// messages lie ahead of it.
    #[allow(dead_code)] // CONSUMER.CREATE calls it once its parser lands.
    pub(super) fn add_consumer(&mut self, name: String, spec: ConsumerSpec) {
        let state = with_store!(&self.store, log => log.state());
        let last_sequence = with_store!(&self.store, log => log.last_sequence());
        let probe = Consumer::new(name.clone(), spec.clone(), 0, 1, 0);
        let start_sequence = match spec.start {
            Start::All => state.first_sequence.max(1),
            Start::New => last_sequence + 1,
            Start::Last => {
                let last_match = with_store!(&self.store, log => log.last_matching(|subject| probe.matches(subject)));
                last_match.unwrap_or(last_sequence + 1)
            }
            Start::Sequence(sequence) => sequence.max(1),
            Start::Time(unix_ns) => with_store!(&self.store, log => log.first_at_or_after(unix_ns))
                .unwrap_or(last_sequence + 1),
        };
        let mut num_pending = 0;
        let mut from = start_sequence;
        while let Some(sequence) = with_store!(&self.store, log => log.next_matching(from, |subject| probe.matches(subject)))
        {
            num_pending += 1;
            from = sequence + 1;
        }
        let consumer = Consumer::new(
            name.clone(),
            spec,
            now_unix_ns(),
            start_sequence,
            num_pending,
        );
        self.consumers.insert(name, consumer);
    }

    /// A message was applied: consumers that select it have one more pending.
    pub(super) fn consumers_saw(&mut self, subject: &[u8]) {
        for consumer in self.consumers.values_mut() {
            if consumer.matches(subject) {
                consumer.num_pending += 1;
            }
        }
    }

    /// Queues a pull request and answers what must be answered at once.
    pub(super) fn consumer_pull(&mut self, name: &str, request: PullRequest) {
        let now_ns = now_unix_ns();
        let mut replies = Vec::new();
        let Some(consumer) = self.consumers.get_mut(name) else {
            return;
        };
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
    ) {
        let now_ns = now_unix_ns();
        let Some(consumer) = self.consumers.get_mut(name) else {
            return;
        };
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
            }
            AckRequest::Progress => consumer.delivery.in_progress(stream_sequence, now_ns),
            AckRequest::Term => {
                consumer.delivery.term(stream_sequence, consumer_sequence);
                consumer.last_acked_unix_ns = now_ns;
            }
        }
        // Double ack: an empty message once it is processed.
        if let Some(reply) = reply {
            self.js.publish_reply(&reply, b"");
        }
    }

    /// Runs every consumer's timers due at `now_ns`: ack waits, pull
    /// expiries and heartbeats.
    pub(super) fn consumer_timers(&mut self, now_ns: u64) {
        let first_sequence = with_store!(&self.store, log => log.state()).first_sequence;
        let mut statuses = Vec::new();
        for consumer in self.consumers.values_mut() {
            if consumer.wake_at_ns.is_none_or(|at| at > now_ns) {
                continue;
            }
            consumer.wake_at_ns = None;
            let pending = consumer.delivery.check_pending(now_ns, first_sequence);
            let mut replies = Vec::new();
            let pull = consumer.pull.process(now_ns, false, &mut replies);
            consumer.wake_at(pending);
            consumer.wake_at(pull);
            statuses.push((consumer.name.clone(), replies));
        }
        for (name, replies) in statuses {
            self.send_statuses(&name, replies);
        }
    }

    /// The earliest consumer timer.
    pub(super) fn consumers_wake_at_ns(&self) -> Option<u64> {
        self.consumers
            .values()
            .filter_map(|consumer| consumer.wake_at_ns)
            .min()
    }

    /// Serves waiting pull requests from the store, at most
    /// [`DELIVERIES_PER_TURN_MAX`] deliveries.
    pub(super) async fn deliver_to_consumers(&mut self) -> Result<(), StoreError> {
        let names: Vec<String> = self
            .consumers
            .iter()
            .filter(|(_, consumer)| !consumer.pull.is_empty())
            .map(|(name, _)| name.clone())
            .collect();
        let mut budget = DELIVERIES_PER_TURN_MAX;
        for name in names {
            budget -= self.deliver_pull(&name, budget).await?;
            if budget == 0 {
                break;
            }
        }
        Ok(())
    }

    /// Delivers to one consumer's waiting requests; returns how many.
    async fn deliver_pull(&mut self, name: &str, budget: usize) -> Result<usize, StoreError> {
        let mut delivered = 0;
        let mut replies = Vec::new();
        let mut end_of_stream = false;
        while delivered < budget {
            let now_ns = now_unix_ns();
            let Some(consumer) = self.consumers.get_mut(name) else {
                break;
            };
            if consumer.pull.is_empty() {
                break;
            }
            let (sequence, redelivery) = match consumer.delivery.next_to_deliver() {
                Next::Stalled => break,
                Next::Redeliver { stream_sequence } => (stream_sequence, true),
                Next::FromStream { stream_sequence } => {
                    let consumer = &*consumer;
                    let found = with_store!(&self.store, log => log.next_matching(stream_sequence, |subject| consumer.matches(subject)));
                    match found {
                        Some(sequence) => (sequence, false),
                        None => {
                            end_of_stream = true;
                            break;
                        }
                    }
                }
            };
            let message = with_store!(&self.store, log => log.get(sequence).await)?;
            let consumer = self.consumers.get_mut(name).expect("looked up above");
            let Some(message) = message else {
                if redelivery {
                    consumer.delivery.message_gone(sequence);
                }
                continue;
            };
            let pending_after = consumer.num_pending.saturating_sub(u64::from(!redelivery));
            let upcoming = consumer.delivery.upcoming(sequence);
            let ack = ack_subject(
                &self.handle.name,
                name,
                upcoming.delivery_count,
                sequence,
                upcoming.consumer_sequence,
                message.timestamp_ns,
                pending_after,
            );
            let header_block = if consumer.spec.headers_only {
                headers_only(&message.headers, message.payload.len())
            } else {
                message.headers.clone()
            };
            let payload: &[u8] = if consumer.spec.headers_only {
                &[]
            } else {
                &message.payload
            };
            let size_bytes =
                (message.subject.len() + ack.len() + header_block.len() + payload.len()) as u64;
            let Some(target) = consumer.pull.take(size_bytes, now_ns, &mut replies) else {
                break;
            };
            let delivery = consumer.delivery.delivered_at(sequence, now_ns);
            debug_assert_eq!(delivery, upcoming);
            if !redelivery {
                consumer.num_pending = consumer.num_pending.saturating_sub(1);
            }
            consumer.last_delivered_unix_ns = now_ns;
            consumer.wake_at(Some(now_ns + consumer.spec.delivery.ack_wait_ns.max(1)));
            let mut body = Vec::with_capacity(header_block.len() + payload.len());
            body.extend_from_slice(&header_block);
            body.extend_from_slice(payload);
            self.js.shard().publish_delivery(
                &target.reply,
                &message.subject,
                Some(ack.as_bytes()),
                header_block.len(),
                &body,
            );
            if let Some(status) = target.then {
                replies.push(Reply {
                    reply: target.reply,
                    status,
                });
            }
            delivered += 1;
        }
        if end_of_stream {
            if let Some(consumer) = self.consumers.get_mut(name) {
                let wake = consumer.pull.process(now_unix_ns(), true, &mut replies);
                consumer.wake_at(wake);
            }
        }
        self.send_statuses(name, replies);
        Ok(delivered)
    }

    fn send_statuses(&self, name: &str, replies: Vec<Reply>) {
        let delivered = self
            .consumers
            .get(name)
            .map_or((0, 0), |consumer| consumer.delivery.delivered());
        for Reply { reply, status } in replies {
            let head = status_header(&status, delivered);
            self.js
                .shard()
                .publish_internal(&reply, head.len(), head.as_bytes());
        }
    }
}

/// The status line and headers nats-server sends for a pull status;
/// `delivered` is the consumer's (consumer, stream) sequence pair, which
/// idle heartbeats carry.
pub fn status_header(status: &Status, delivered: (u64, u64)) -> String {
    match status {
        Status::NoMessages => "NATS/1.0 404 No Messages\r\n\r\n".into(),
        Status::RequestTimeout {
            pending_messages,
            pending_bytes,
        } => format!(
            "NATS/1.0 408 Request Timeout\r\nNats-Pending-Messages: {pending_messages}\r\nNats-Pending-Bytes: {pending_bytes}\r\n\r\n"
        ),
        Status::RequestsPending => "NATS/1.0 408 Requests Pending\r\n\r\n".into(),
        Status::ExceededMaxWaiting => "NATS/1.0 409 Exceeded MaxWaiting\r\n\r\n".into(),
        Status::MessageSizeExceedsMaxBytes {
            pending_messages,
            pending_bytes,
        } => format!(
            "NATS/1.0 409 Message Size Exceeds MaxBytes\r\nNats-Pending-Messages: {pending_messages}\r\nNats-Pending-Bytes: {pending_bytes}\r\n\r\n"
        ),
        Status::BatchCompleted { pending_bytes } => format!(
            "NATS/1.0 409 Batch Completed\r\nNats-Pending-Messages: 0\r\nNats-Pending-Bytes: {pending_bytes}\r\n\r\n"
        ),
        Status::IdleHeartbeat => format!(
            "NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: {}\r\nNats-Last-Stream: {}\r\n\r\n",
            delivered.0, delivered.1
        ),
        Status::ConsumerDeleted => "NATS/1.0 409 Consumer Deleted\r\n\r\n".into(),
    }
}

/// The numbers of a v1 ack subject.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AckNumbers {
    pub consumer: String,
    pub stream_sequence: u64,
    pub consumer_sequence: u64,
}

/// `$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>`.
pub fn parse_ack_subject(subject: &[u8]) -> Option<AckNumbers> {
    let text = std::str::from_utf8(subject).ok()?;
    let tokens: Vec<&str> = text.split('.').collect();
    if tokens.len() != 9 || tokens[0] != "$JS" || tokens[1] != "ACK" {
        return None;
    }
    Some(AckNumbers {
        consumer: tokens[3].to_string(),
        stream_sequence: tokens[5].parse().ok()?,
        consumer_sequence: tokens[6].parse().ok()?,
    })
}
