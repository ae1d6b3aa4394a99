//! A pull consumer's waiting requests (`$JS.API.CONSUMER.MSG.NEXT`), sans
//! IO, as nats-server 2.15's `waitQueue` and `processNextMsgRequest`,
//! `nextWaiting`, `processWaiting` treat them: FIFO with round-robin between
//! requests, `batch` and `max_bytes` budgets, `no_wait` answered at the end
//! of the stream, `expires`, idle heartbeats, and `max_waiting`.
//!
//! The owner hands each message it is about to deliver to
//! [`PullQueue::take`], which names the request it goes to (or none, and the
//! message is not delivered). Statuses the server must send come back as
//! [`Reply`] values; their bytes are written elsewhere.

use std::collections::VecDeque;

use bytes::Bytes;

/// One MSG.NEXT request, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullRequest {
    /// Where messages and statuses go.
    pub reply: Bytes,
    /// Messages still wanted (a JSON request without `batch` asks for 0:
    /// it waits for its expiry and takes nothing, as in nats-server).
    pub batch: u64,
    /// Bytes still allowed (0: no byte limit).
    pub max_bytes: u64,
    /// Unix ns after which the request ends with 408 (None: never).
    pub expires_at_ns: Option<u64>,
    /// End at the end of the stream (404) rather than wait.
    pub no_wait: bool,
    /// Idle heartbeat interval in ns (0: none).
    pub heartbeat_ns: u64,
}

/// A status to send to a request's reply subject.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    /// `404 No Messages`.
    NoMessages,
    /// `408 Request Timeout` with what was left of the request.
    RequestTimeout {
        pending_messages: u64,
        pending_bytes: u64,
    },
    /// `408 Requests Pending`: a no_wait request while others already
    /// cover every pending message.
    RequestsPending,
    /// `409 Exceeded MaxWaiting`.
    ExceededMaxWaiting,
    /// `409 Message Size Exceeds MaxBytes`.
    MessageSizeExceedsMaxBytes {
        pending_messages: u64,
        pending_bytes: u64,
    },
    /// `409 Batch Completed`: the batch is done with bytes left.
    BatchCompleted { pending_bytes: u64 },
    /// `100 Idle Heartbeat`.
    IdleHeartbeat,
    /// `409 Consumer Deleted`.
    ConsumerDeleted,
}

/// A status for one reply subject.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub reply: Bytes,
    pub status: Status,
}

/// Where one message goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub reply: Bytes,
    /// Sent after the message (`409 Batch Completed`).
    pub then: Option<Status>,
}

#[derive(Debug, Clone)]
struct Waiting {
    request: PullRequest,
    /// Messages delivered to it so far.
    delivered: u64,
    /// Next idle heartbeat (Unix ns).
    heartbeat_at_ns: Option<u64>,
}

/// The waiting requests of one pull consumer.
#[derive(Debug)]
pub struct PullQueue {
    waiting: VecDeque<Waiting>,
    max_waiting: usize,
}

impl PullQueue {
    pub fn new(max_waiting: usize) -> PullQueue {
        assert!(max_waiting > 0);
        PullQueue {
            waiting: VecDeque::new(),
            max_waiting,
        }
    }

    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// Drops the requests whose reply subject nobody listens to any more
    /// (the client unsubscribed its fetch inbox), silently, as nats-server
    /// does (`nextWaiting`, `processWaiting`): a message delivered there
    /// would only wait out its ack_wait. Returns how many went.
    pub fn drop_uninterested(&mut self, mut has_interest: impl FnMut(&[u8]) -> bool) -> usize {
        let before = self.waiting.len();
        self.waiting
            .retain(|waiting| has_interest(&waiting.request.reply));
        before - self.waiting.len()
    }

    /// Messages the waiting requests still want.
    pub fn batch_pending(&self) -> u64 {
        self.waiting
            .iter()
            .map(|waiting| waiting.request.batch)
            .sum()
    }

    /// Queues a request (`processNextMsgRequest` after its limit checks).
    /// `messages_pending` is what the consumer could deliver now (num
    /// pending plus queued redeliveries). A refused request is not queued:
    /// `Err(Some(status))` is its answer, `Err(None)` means silence.
    /// Requests that expired to make room are answered in `replies`.
    pub fn add(
        &mut self,
        request: PullRequest,
        messages_pending: u64,
        now_ns: u64,
        replies: &mut Vec<Reply>,
    ) -> Result<(), Option<Status>> {
        if request.no_wait {
            if messages_pending == 0 && request.expires_at_ns.is_none() {
                return Err(Some(Status::NoMessages));
            }
            if messages_pending > 0 && messages_pending < self.batch_pending() {
                return Err(Some(Status::RequestsPending));
            }
        }
        if self.waiting.len() >= self.max_waiting {
            self.expire(now_ns, replies);
        }
        if self.waiting.len() >= self.max_waiting {
            // With a heartbeat the client waits for the missing beats
            // instead of retrying in a loop: no answer then.
            return Err((request.heartbeat_ns == 0).then_some(Status::ExceededMaxWaiting));
        }
        let heartbeat_at_ns =
            (request.heartbeat_ns > 0).then(|| now_ns.saturating_add(request.heartbeat_ns));
        self.waiting.push_back(Waiting {
            request,
            delivered: 0,
            heartbeat_at_ns,
        });
        Ok(())
    }

    /// Chooses the request a message of `size_bytes` goes to (nats-server's
    /// `nextWaiting` + `pop`): the head, which moves to the back while it
    /// wants more. Requests that expired or cannot take the size are ended
    /// on the way (their statuses are pushed to `replies`).
    pub fn take(
        &mut self,
        size_bytes: u64,
        now_ns: u64,
        replies: &mut Vec<Reply>,
    ) -> Option<Target> {
        let mut looked = 0;
        let candidates = self.waiting.len();
        while let Some(mut head) = self.waiting.pop_front() {
            looked += 1;
            if head.request.batch == 0
                && head
                    .request
                    .expires_at_ns
                    .is_none_or(|expires| now_ns < expires)
            {
                // Wants nothing: keeps waiting for its expiry.
                self.waiting.push_back(head);
                if looked >= candidates {
                    return None;
                }
                continue;
            }
            if head
                .request
                .expires_at_ns
                .is_some_and(|expires| now_ns >= expires)
            {
                replies.push(timeout(&head));
                continue;
            }
            let request = &mut head.request;
            if request.max_bytes > 0 {
                if size_bytes > request.max_bytes {
                    replies.push(Reply {
                        reply: request.reply.clone(),
                        status: Status::MessageSizeExceedsMaxBytes {
                            pending_messages: request.batch,
                            pending_bytes: request.max_bytes,
                        },
                    });
                    continue;
                }
                request.max_bytes -= size_bytes;
                if request.max_bytes == 0 {
                    request.batch = 1;
                }
            }
            request.batch -= 1;
            head.delivered += 1;
            if head.request.heartbeat_ns > 0 {
                head.heartbeat_at_ns = Some(now_ns.saturating_add(head.request.heartbeat_ns));
            }
            let then = (head.request.batch == 0 && head.request.max_bytes > 0).then_some(
                Status::BatchCompleted {
                    pending_bytes: head.request.max_bytes,
                },
            );
            let target = Target {
                reply: head.request.reply.clone(),
                then,
            };
            if head.request.batch > 0 {
                self.waiting.push_back(head);
            }
            return Some(target);
        }
        None
    }

    /// nats-server's `processWaiting`: ends expired requests (408); at the
    /// end of the stream (`end_of_stream`), ends `no_wait` requests that
    /// got something or have no expiry (404); sends due idle heartbeats.
    /// Returns when to look again (Unix ns), if anything waits.
    pub fn process(
        &mut self,
        now_ns: u64,
        end_of_stream: bool,
        replies: &mut Vec<Reply>,
    ) -> Option<u64> {
        let mut next_ns: Option<u64> = None;
        let mut kept = VecDeque::with_capacity(self.waiting.len());
        for mut waiting in self.waiting.drain(..) {
            if waiting
                .request
                .expires_at_ns
                .is_some_and(|expires| now_ns >= expires)
            {
                replies.push(timeout(&waiting));
                continue;
            }
            if end_of_stream
                && waiting.request.no_wait
                && (waiting.request.expires_at_ns.is_none() || waiting.delivered > 0)
            {
                replies.push(Reply {
                    reply: waiting.request.reply.clone(),
                    status: Status::NoMessages,
                });
                continue;
            }
            if let Some(heartbeat_at_ns) = waiting.heartbeat_at_ns {
                if now_ns >= heartbeat_at_ns {
                    replies.push(Reply {
                        reply: waiting.request.reply.clone(),
                        status: Status::IdleHeartbeat,
                    });
                    waiting.heartbeat_at_ns =
                        Some(now_ns.saturating_add(waiting.request.heartbeat_ns));
                }
            }
            for candidate in [waiting.heartbeat_at_ns, waiting.request.expires_at_ns]
                .into_iter()
                .flatten()
            {
                next_ns = Some(next_ns.map_or(candidate, |next| next.min(candidate)));
            }
            kept.push_back(waiting);
        }
        self.waiting = kept;
        next_ns
    }

    /// Drops expired requests (answering 408) without the end-of-stream rule.
    fn expire(&mut self, now_ns: u64, replies: &mut Vec<Reply>) {
        self.waiting.retain(|waiting| {
            let expired = waiting
                .request
                .expires_at_ns
                .is_some_and(|expires| now_ns >= expires);
            if expired {
                replies.push(timeout(waiting));
            }
            !expired
        });
    }

    /// Ends every request (consumer deleted): `409 Consumer Deleted` each.
    pub fn close(&mut self) -> Vec<Reply> {
        self.waiting
            .drain(..)
            .map(|waiting| Reply {
                reply: waiting.request.reply,
                status: Status::ConsumerDeleted,
            })
            .collect()
    }
}

fn timeout(waiting: &Waiting) -> Reply {
    Reply {
        reply: waiting.request.reply.clone(),
        status: Status::RequestTimeout {
            pending_messages: waiting.request.batch,
            pending_bytes: waiting.request.max_bytes,
        },
    }
}

#[cfg(test)]
#[path = "pull_tests.rs"]
mod tests;
