//! Durable consumers through the stream's Raft log, so they resume exactly
//! after a restart or a SIGKILL. A child of `stream`, beside
//! `consumers`, so it works on the task's own state.
//!
//! - A durable's create, config update and delete are proposed as
//!   [`Operation::ConsumerCreate`]/[`Operation::ConsumerDelete`] and take
//!   effect (and are answered) when they apply.
//! - Its delivery state rides in [`Operation::ConsumerState`] snapshots,
//!   batched by themselves: after each turn, every durable whose state
//!   changed and has no snapshot in flight proposes one. At most one
//!   snapshot per consumer is uncommitted, so under load one snapshot covers
//!   everything that happened while the previous one was being made durable.
//! - Barriers: a double ack's reply, and CONSUMER.INFO of a durable, are
//!   answered only once a snapshot that includes what they report applied,
//!   so what a client was told survives a SIGKILL.
//! - The checkpoint writes every durable's config and last APPLIED snapshot
//!   to the `consumers` file (`consumer_store`) before the journal may drop
//!   the entries; `open` loads it into the replicated state, replays the
//!   entries after it, and the replica's take-office starts each live
//!   consumer from what that left (`ConsumerLeader::take_office`).
//!
//! Ephemeral consumers, and every consumer of a one-replica memory stream,
//! stay in memory only (nats-server's behaviour); a replicated memory
//! stream's durables ride in its log like a file stream's.

use bytes::Bytes;

use super::super::api::error::ApiError;
use super::super::api::responses::ApiReply;
use super::super::consumer::config::ConsumerConfig;
use super::super::consumer::responses as consumer_responses;
use super::super::consumer::store::{self as consumer_store, StoredConsumer, StoredConsumers};
use super::super::consumer::ConsumerSpec;
use super::super::entry::Operation;
use super::super::persist;
use super::consumer_leader::{check_logged, Waiter};
use super::failure::StreamFailure;
use super::groups::Persistence;
use super::replica::StateOutcome;
use super::state::LoggedConsumer;
use super::{now_unix_ns, Owed, StreamTask};

/// A consumer reply owed once an entry applies.
pub enum ConsumerOwed {
    /// Rendered already: a double ack's empty reply (`origin` none: the
    /// reply is published), or an INFO body.
    Reply {
        origin: Option<usize>,
        reply: Bytes,
        body: Bytes,
    },
    /// CONSUMER.CREATE of a durable: the info once its entry applied.
    Created {
        origin: usize,
        reply: Option<Bytes>,
        name: String,
    },
    /// CONSUMER.DELETE of a durable.
    Deleted { origin: usize, reply: Option<Bytes> },
}

impl StreamTask {
    /// Whether a consumer with this config lives in the log: durables of
    /// streams whose log is on the journal, and of replicated streams (a
    /// memory stream's too: its replicas keep them across a leader change,
    /// as nats-server's replicated consumers).
    pub(super) fn persists(&self, config: &ConsumerConfig) -> bool {
        config.is_durable()
            && (self.persistence == Persistence::Journal || self.handle.is_replicated())
    }

    /// Proposes a durable's create or config update; answered when it
    /// applies.
    pub(super) fn propose_consumer_create(
        &mut self,
        origin: usize,
        reply: Option<Bytes>,
        name: String,
        config: &ConsumerConfig,
        spec: &ConsumerSpec,
    ) -> Result<(), ApiError> {
        let (created_unix_ns, start_sequence) = match self.core.replica.consumers.get(&name) {
            Some(existing) => (
                existing.created_unix_ns,
                existing.delivery.next_stream_sequence(),
            ),
            None => (now_unix_ns(), self.resolve_start(&name, config, spec)),
        };
        let operation = Operation::ConsumerCreate {
            name: name.clone(),
            created_unix_ns,
            start_sequence,
            json: Bytes::from(config.to_stored_json()),
        };
        let index = self
            .propose(&operation)
            .map_err(|_| ApiError::cluster_not_leader())?;
        self.owe(
            index,
            Owed::Consumer(ConsumerOwed::Created {
                origin,
                reply,
                name,
            }),
        );
        Ok(())
    }

    /// Proposes a durable's delete; answered when it applies.
    pub(super) fn propose_consumer_delete(
        &mut self,
        origin: usize,
        reply: Option<Bytes>,
        name: &str,
    ) -> Result<(), ApiError> {
        let operation = Operation::ConsumerDelete {
            name: name.to_string(),
        };
        let index = self
            .propose(&operation)
            .map_err(|_| ApiError::cluster_not_leader())?;
        self.owe(
            index,
            Owed::Consumer(ConsumerOwed::Deleted { origin, reply }),
        );
        Ok(())
    }

    /// Whether `name` is a durable whose state is in the log.
    pub(super) fn is_logged(&self, name: &str) -> bool {
        self.core.replica.consumers.is_logged(name)
    }

    /// A double ack's reply: at once for a consumer kept in memory, after
    /// the snapshot holding the ack applied for a durable.
    pub(super) fn answer_ack(&mut self, name: &str, reply: Bytes) {
        match self.core.replica.consumers.logged_mut(name) {
            Some((_, entries)) => entries.wait(Waiter::Ack { reply }),
            None => self.js.publish_reply(&reply, b""),
        }
    }

    /// CONSUMER.INFO of a durable: `Some(body)` to answer now (its state is
    /// in an applied snapshot), `None` when the answer is owed.
    pub(super) fn durable_info(
        &mut self,
        origin: usize,
        reply: Option<Bytes>,
        name: &str,
    ) -> Option<String> {
        let (consumer, entries) = self.core.replica.consumers.logged(name)?;
        if entries.changed(&consumer.delivery) {
            if let Some(reply) = reply {
                let (_, entries) = self
                    .core
                    .replica
                    .consumers
                    .logged_mut(name)
                    .expect("looked up above");
                entries.wait(Waiter::Info { origin, reply });
            }
            return None;
        }
        let body = self.consumer_info(consumer, "consumer_info_response");
        if entries.in_flight().is_none() {
            return Some(body);
        }
        // What it reports is in the snapshot in flight: answer once
        // everything proposed so far applied.
        if let Some(reply) = reply {
            let last_index = self.last_index();
            self.owe(
                last_index,
                Owed::Consumer(ConsumerOwed::Reply {
                    origin: Some(origin),
                    reply,
                    body: Bytes::from(body),
                }),
            );
        }
        None
    }

    /// After a turn: a state entry for every durable whose state changed
    /// and has none in flight ([`Replica::propose_due_states`]); the
    /// replies that waited for one are owed until it applies (at once when
    /// nothing changed). Returns whether anything was proposed.
    pub(super) fn propose_consumer_snapshots(&mut self) -> Result<bool, StreamFailure> {
        let replica = &mut self.core.replica;
        let proposals = self
            .groups
            .with_node(self.core.group, |node| replica.propose_due_states(node))?;
        let mut proposed = false;
        for due in proposals {
            let index = match due.outcome {
                StateOutcome::Proposed { index, .. } => Some(index),
                StateOutcome::NothingNew => None,
                // A single voter always leads and never transfers.
                StateOutcome::Refused(error) if !self.handle.is_replicated() => {
                    return Err(StreamFailure::Refused {
                        what: "consumer state",
                        error,
                    });
                }
                // Leadership moving: the acks waiting fail as with any
                // change of leader (their clients see a redelivery at
                // worst).
                StateOutcome::Refused(_) => {
                    self.fail_due_waiters(&due.name, due.waiting);
                    continue;
                }
            };
            proposed |= index.is_some();
            for waiter in due.waiting {
                let owed = match waiter {
                    Waiter::Ack { reply } => ConsumerOwed::Reply {
                        origin: None,
                        reply,
                        body: Bytes::new(),
                    },
                    Waiter::Info { origin, reply } => {
                        let consumer = self
                            .core
                            .replica
                            .consumers
                            .get(&due.name)
                            .expect("a due durable");
                        ConsumerOwed::Reply {
                            origin: Some(origin),
                            reply,
                            body: Bytes::from(
                                self.consumer_info(consumer, "consumer_info_response"),
                            ),
                        }
                    }
                };
                match index {
                    Some(index) => self.owe(index, Owed::Consumer(owed)),
                    None => self.send_consumer_owed(owed),
                }
            }
        }
        Ok(proposed)
    }

    /// Replies that waited for a state entry that could not be proposed
    /// (leadership moving): an ack gets no reply, as when the leader it
    /// went to steps down (the client's retry or the redelivery settles
    /// it); an info request gets 10009.
    fn fail_due_waiters(&self, name: &str, waiting: Vec<Waiter>) {
        for waiter in waiting {
            match waiter {
                Waiter::Ack { .. } => {}
                Waiter::Info { origin, reply } => self.answer_error(
                    origin,
                    Some(reply),
                    "consumer_info_response",
                    &ApiError::cluster_not_leader(),
                ),
            }
        }
        log::debug!(target: "tern::consumer", "stream {}: consumer {name}: state entry deferred, leadership moving", self.handle.name);
    }

    pub(super) fn send_consumer_owed(&self, owed: ConsumerOwed) {
        match owed {
            ConsumerOwed::Reply {
                origin: None,
                reply,
                body,
            } => self.js.publish_reply(&reply, &body),
            ConsumerOwed::Reply {
                origin: Some(origin),
                reply,
                body,
            } => self
                .js
                .respond(origin, reply, String::from_utf8_lossy(&body).into_owned()),
            ConsumerOwed::Created {
                origin,
                reply,
                name,
            } => {
                let Some(reply) = reply else {
                    return;
                };
                let kind = "consumer_create_response";
                let answer = match self.core.replica.consumers.get(&name) {
                    Some(consumer) => ApiReply::success(self.consumer_info(consumer, kind)),
                    None => ApiReply::error(kind, &ApiError::consumer_not_found()),
                };
                self.js.respond(origin, reply, answer);
            }
            ConsumerOwed::Deleted { origin, reply } => {
                if let Some(reply) = reply {
                    self.js.respond(
                        origin,
                        reply,
                        consumer_responses::consumer_delete_response(),
                    );
                }
            }
        }
    }

    /// The stream stopped: owed API answers get `error`.
    pub(super) fn fail_consumer_owed(&self, owed: ConsumerOwed, error: &ApiError) {
        match owed {
            ConsumerOwed::Reply { .. } => {}
            ConsumerOwed::Created { origin, reply, .. } => {
                self.answer_error(origin, reply, "consumer_create_response", error)
            }
            ConsumerOwed::Deleted { origin, reply } => {
                self.answer_error(origin, reply, "consumer_delete_response", error)
            }
        }
    }

    // ----- checkpoint and recovery ---------------------------------------------

    /// Writes the `consumers` file (before the `raft` file: the journal
    /// drops the entries once that one is written).
    pub(super) async fn checkpoint_consumers(&mut self) -> Result<(), StreamFailure> {
        let Some(files) = &self.files else {
            return Ok(());
        };
        if self.core.replica.state.logged_consumers.is_empty() && !self.consumers_file.written {
            return Ok(());
        }
        let stored = StoredConsumers {
            applied_index: self.core.replica.state.applied_index,
            consumers: self
                .core
                .replica
                .state
                .logged_consumers
                .iter()
                .map(|(name, logged)| StoredConsumer {
                    name: name.clone(),
                    created_unix_ns: logged.created_unix_ns,
                    json: logged.config_json.to_vec(),
                    state: logged.delivery_state.to_vec(),
                })
                .collect(),
        };
        let checksum = consumer_store::write(files, &stored).await?;
        self.consumers_file.written = true;
        self.consumers_file.reference = Some(persist::ConsumersReference {
            applied_index: stored.applied_index,
            checksum,
        });
        Ok(())
    }

    /// Loads the `consumers` file before the journal's entries replay. It
    /// must be the one the checkpoint (`raft`) names, or a newer one whose
    /// checkpoint was interrupted before its `raft` file was written (the
    /// journal then still holds everything after the older checkpoint, and
    /// its consumer entries replay idempotently on top).
    pub(super) async fn load_consumers(
        &mut self,
        raft: &persist::RaftState,
    ) -> Result<(), StreamFailure> {
        let Some(files) = &self.files else {
            return Ok(());
        };
        let path = self
            .js
            .stream_directory(&self.handle.name)
            .join(consumer_store::CONSUMERS_FILE);
        let found = consumer_store::read(files).await?;
        let path = path.display().to_string();
        let stored = match (found, raft.consumers) {
            (None, None) => return Ok(()),
            (None, Some(expected)) => {
                return Err(StreamFailure::ConsumersFile {
                    path,
                    problem: format!(
                        "is missing (the checkpoint at index {} recorded it, with the durable consumers as of index {})",
                        raft.applied_index, expected.applied_index
                    ),
                })
            }
            (Some((stored, _)), _) if stored.applied_index > raft.applied_index => stored,
            (Some((stored, checksum)), Some(expected))
                if stored.applied_index == expected.applied_index
                    && checksum == expected.checksum =>
            {
                stored
            }
            (Some((stored, checksum)), expected) => {
                return Err(StreamFailure::ConsumersFile {
                    path,
                    problem: format!(
                    "is not the one the checkpoint recorded (it holds index {} with checksum {checksum:#x}; the checkpoint at index {} expects {})",
                    stored.applied_index,
                    raft.applied_index,
                    match expected {
                        Some(expected) => format!(
                            "index {} with checksum {:#x}",
                            expected.applied_index, expected.checksum
                        ),
                        None => "no consumers file".into(),
                    }
                ),
                })
            }
        };
        self.consumers_file.reference = raft.consumers;
        self.consumers_file.written = true;
        for StoredConsumer {
            name,
            created_unix_ns,
            json,
            state,
        } in stored.consumers
        {
            // Checked here, to say where a bad one came from; the live
            // consumer starts from it when the replica takes office.
            let (config_json, delivery_state) = (Bytes::from(json), Bytes::from(state));
            check_logged(&name, &config_json, &delivery_state)
                .map_err(StreamFailure::ConsumersFileEntry)?;
            self.core.replica.state.logged_consumers.insert(
                name,
                LoggedConsumer {
                    created_unix_ns,
                    config_json,
                    delivery_state,
                },
            );
        }
        Ok(())
    }
}
