//! The stream task's API answers: info, purge, message get and delete,
//! config updates, consumer calls routed to it, direct gets.

use bytes::Bytes;
use rustc_hash::FxHashMap;
use tern_storage::block_store::{StoreError, StoredMessage, StreamState};

use super::super::api::error::ApiError;
use super::super::api::requests::{self, MessageGet};
use super::super::api::responses::{self, ApiReply};
use super::super::entry::Operation;
use super::super::replication::GroupView;
use super::super::stepdown;
use super::super::{now_unix_ns, JetStream};
use super::config::{subject_matches, StreamConfig};
use super::failure::StreamFailure;
use super::leader::{Owed, OwedReply};
use super::*;

/// What a stream's info is written for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum InfoAnswer {
    /// STREAM.INFO: with its paging and the `cluster` block.
    Info,
    /// STREAM.INFO asked by the meta leader for its STREAM.LIST: as
    /// [`InfoAnswer::Info`], without the config's dynamic metadata.
    ListElement,
    /// The answer to a create or an update (a `cluster` block only in a
    /// cluster).
    Config,
}

/// What a stream info answer holds beyond the config and state: its
/// response type, and what the request asked for.
#[derive(Debug, Clone, Copy)]
pub(super) struct InfoQuery<'a> {
    /// The response type (`stream_info_response`, `stream_create_response`, …).
    pub(super) kind: &'a str,
    /// A create's `did_create`: the stream did not exist before.
    pub(super) did_create: bool,
    /// STREAM.INFO `subjects_filter`: the matching subjects and their
    /// counts, a page from `offset` on.
    pub(super) subjects_filter: Option<&'a str>,
    pub(super) offset: usize,
    /// STREAM.INFO `deleted_details`: the deleted sequences.
    pub(super) deleted_details: bool,
    pub(super) answer: InfoAnswer,
}

impl<'a> InfoQuery<'a> {
    /// The answer to a create or an update (`kind`): the config and state,
    /// nothing asked for (`did_create` false).
    pub(super) fn config(kind: &'a str) -> InfoQuery<'a> {
        InfoQuery {
            kind,
            did_create: false,
            subjects_filter: None,
            offset: 0,
            deleted_details: false,
            answer: InfoAnswer::Config,
        }
    }
}

/// How a direct-get batch is sent: at most `messages_max` messages and
/// (when non-zero) about `bytes_max`, then the end-of-batch status.
#[derive(Debug, Clone, Copy)]
pub(super) struct DirectBatchReply {
    pub(super) messages_max: usize,
    pub(super) bytes_max: usize,
    /// `no_hdr`: the payloads alone.
    pub(super) no_headers: bool,
    /// `Nats-UpTo-Sequence` in the end-of-batch status (multi_last).
    pub(super) up_to_sequence: Option<u64>,
}

impl StreamTask {
    /// Proposes a client's `operation` and owes its answer (`owed`) once
    /// it applies; with leadership moving, answers 500 10009 (`kind`) at
    /// once.
    fn propose_owing(
        &mut self,
        operation: &Operation,
        (what, kind): (&'static str, &str),
        (origin, reply): (usize, Option<Bytes>),
        owed: fn(usize, Option<Bytes>) -> Owed,
    ) -> Result<(), StreamFailure> {
        match self.propose_as_leader(operation, what)? {
            Some(index) => self.owe(index, owed(origin, reply)),
            None => self.answer_error(origin, reply, kind, &ApiError::cluster_not_leader()),
        }
        Ok(())
    }

    // ----- API calls ----------------------------------------------------------------

    pub(super) async fn api(&mut self, call: ApiCall) -> Result<(), StreamFailure> {
        let ApiCall {
            origin,
            reply,
            payload,
            kind,
        } = call;
        match kind {
            StreamApi::Info => {
                // The meta leader's STREAM.LIST asks each stream for its
                // element of the list.
                let answer = if JetStream::is_gather_reply(reply.as_deref()) {
                    InfoAnswer::ListElement
                } else {
                    InfoAnswer::Info
                };
                let body = requests::StreamInfoRequest::parse(&payload).map(|request| {
                    self.info_response(InfoQuery {
                        kind: "stream_info_response",
                        did_create: false,
                        subjects_filter: request.subjects_filter.as_deref(),
                        offset: request.offset,
                        deleted_details: request.deleted_details,
                        answer,
                    })
                });
                if let Some(reply) = reply {
                    let answer = ApiReply::of("stream_info_response", body);
                    self.js.respond(origin, reply, answer);
                }
            }
            StreamApi::Purge => {
                let request = match requests::PurgeRequest::parse(&payload) {
                    Ok(request) => request,
                    Err(error) => {
                        self.answer_error(origin, reply, "stream_purge_response", &error);
                        return Ok(());
                    }
                };
                let refusal = if self.core.replica.state.config.sealed {
                    Some(ApiError::sealed())
                } else if self.core.replica.state.config.deny_purge {
                    Some(ApiError::purge_not_permitted())
                } else {
                    None
                };
                if let Some(error) = refusal {
                    self.answer_error(origin, reply, "stream_purge_response", &error);
                    return Ok(());
                }
                let operation = Operation::Purge {
                    last: self.core.replica.leader.last_sequence,
                    filter: request.filter.map(Bytes::from),
                    sequence: request.sequence,
                    keep: request.keep,
                };
                self.propose_owing(
                    &operation,
                    ("purge", "stream_purge_response"),
                    (origin, reply),
                    |origin, reply| Owed::Purge { origin, reply },
                )?;
            }
            StreamApi::MessageDelete => {
                let request = match requests::MessageDeleteRequest::parse(&payload) {
                    Ok(request) => request,
                    Err(error) => {
                        self.answer_error(origin, reply, "stream_msg_delete_response", &error);
                        return Ok(());
                    }
                };
                let refusal = if self.core.replica.state.config.sealed {
                    Some(ApiError::sealed())
                } else if self.core.replica.state.config.deny_delete {
                    Some(ApiError::message_delete_failed(
                        "message delete not permitted",
                    ))
                } else if with_store!(&self.core.replica.state.store, log => log.subject_of(request.sequence))
                    .is_none()
                {
                    // nats-server's three answers for a missing message.
                    let state = with_store!(&self.core.replica.state.store, log => log.state());
                    Some(if request.sequence > state.last_sequence {
                        ApiError::message_delete_failed("stream store EOF")
                    } else if state.messages == 0 || request.sequence < state.first_sequence {
                        ApiError::message_delete_failed("no message found")
                    } else {
                        ApiError::sequence_not_found(request.sequence)
                    })
                } else {
                    None
                };
                if let Some(error) = refusal {
                    self.answer_error(origin, reply, "stream_msg_delete_response", &error);
                    return Ok(());
                }
                let operation = Operation::Delete {
                    sequence: request.sequence,
                    erase: !request.no_erase,
                };
                self.propose_owing(
                    &operation,
                    ("delete", "stream_msg_delete_response"),
                    (origin, reply),
                    |origin, reply| Owed::Delete { origin, reply },
                )?;
            }
            StreamApi::MessageGet => {
                let body = match requests::parse_message_get(&payload) {
                    Ok((get, no_headers)) => match self.find(&get).await {
                        Ok(Some(message)) => Ok(responses::message_get_response(
                            &String::from_utf8_lossy(&message.subject),
                            message.sequence,
                            if no_headers { &[] } else { &message.headers },
                            &message.payload,
                            message.timestamp_ns,
                        )),
                        Ok(None) => Err(ApiError::no_message_found()),
                        Err(error) => Err(ApiError::store_failed(&error.to_string())),
                    },
                    Err(error) => Err(error),
                };
                if let Some(reply) = reply {
                    let answer = ApiReply::of("stream_msg_get_response", body);
                    self.js.respond(origin, reply, answer);
                }
            }
            StreamApi::DirectGet { subject } => {
                if let Some(reply) = reply {
                    self.direct_get(origin, reply, subject, &payload).await;
                }
            }
            StreamApi::Update {
                config,
                create,
                did_create,
            } => {
                let kind = if create {
                    "stream_create_response"
                } else {
                    "stream_update_response"
                };
                if create {
                    let Some(reply) = reply else {
                        return Ok(());
                    };
                    // Every replica's node has the reply: the elected one
                    // answers (its node subscribes the subjects as it takes
                    // office; the create waited for that); the others hold
                    // it in case they lead next.
                    if self.handle.is_replicated() && !self.is_elected() {
                        self.hold_update_reply(origin, reply, config, Some(did_create));
                        return Ok(());
                    }
                    let body = self.info_response(InfoQuery {
                        did_create,
                        ..InfoQuery::config(kind)
                    });
                    self.js.respond(origin, reply, body);
                    return Ok(());
                }
                if self.handle.is_replicated() {
                    // Every replica's node applied the catalog's change:
                    // whoever leads proposes it (now, or once it leads),
                    // and the replica in office answers once it applied
                    // (at once if it has: the leader's node took the
                    // catalog's change first, or a client's retry of an
                    // update that went through). A reply whose config
                    // another update replaced is never answered (its
                    // client retries).
                    if *config != *self.core.replica.state.config {
                        self.core.desired_config = Some(config.clone());
                    }
                    if let Some(reply) = reply {
                        self.hold_update_reply(origin, reply, config, None);
                    }
                    self.propose_desired_config()?;
                    self.answer_updates();
                    return Ok(());
                }
                // The config file first: the meta shard reads it on start,
                // so a restart never finds the log ahead of the catalog.
                // Then through the log, so the change lands between the
                // messages exactly where it was made (and reaches replicas).
                // A restart replays the log after the checkpoint under the
                // config file's config: everything proposed before this
                // update is applied and checkpointed first, so no entry
                // from before it is ever replayed under the new config (a
                // loosened limit would bring back what the old one removed).
                if self.files.is_some() {
                    self.settle().await?;
                    self.checkpoint().await?;
                }
                let json = config.to_stored_json();
                let stored = self
                    .js
                    .stored_config_json(self.core.group, &json, &self.handle.peers);
                debug_assert!(
                    !self.handle.is_replicated(),
                    "replicated updates apply in the log"
                );
                self.write_config_file(&stored).await?;
                let operation = Operation::Config {
                    json: Bytes::from(json),
                };
                let index = self
                    .propose(&operation)
                    .map_err(|error| StreamFailure::Refused {
                        what: "config update",
                        error,
                    })?;
                self.owe(index, Owed::Update { origin, reply });
            }
            StreamApi::Consumer { tokens } => {
                if self.handle.is_replicated() && !self.is_leading() {
                    // Consumers live on the leader in office. Elected and
                    // still applying its log: the call waits for office.
                    // Not leading (a request routed here before an
                    // election moved the leader): nats-server's 503 10008,
                    // which clients retry.
                    if self.is_elected() && self.serving.has_room_awaiting_office() {
                        self.serving.awaiting_office.push(ApiCall {
                            origin,
                            reply,
                            payload,
                            kind: StreamApi::Consumer { tokens },
                        });
                    } else {
                        let tokens: Vec<&str> = tokens.iter().map(String::as_str).collect();
                        let kind = super::consumers::consumer_response_kind(&tokens);
                        self.answer_error(origin, reply, kind, &ApiError::cluster_unavailable());
                    }
                    return Ok(());
                }
                let tokens: Vec<&str> = tokens.iter().map(String::as_str).collect();
                self.consumer_api(origin, reply, &payload, &tokens);
            }
            StreamApi::Peers { peers } => self.place_on(peers),
            StreamApi::LeaderStepdown => {
                self.step_down(origin, reply, &payload, "stream_leader_stepdown_response");
            }
            StreamApi::ConsumerLeaderStepdown { consumer } => {
                let kind = "consumer_leader_stepdown_response";
                if !self.core.replica.consumers.contains(&consumer) {
                    self.answer_error(origin, reply, kind, &ApiError::consumer_not_found());
                } else if self.is_logged(&consumer) {
                    // A durable in the stream's log: its leader is the
                    // stream's, which steps down.
                    self.step_down(origin, reply, &payload, kind);
                } else if let Some(reply) = reply {
                    // Kept in the leader's memory only (an ephemeral, or a
                    // memory stream's): no replica to hand it to, as
                    // nats-server's consumers without a Raft group, whose
                    // stepdown succeeds and changes nothing.
                    self.js
                        .respond(origin, reply, responses::success_response(kind));
                }
            }
            StreamApi::Delete => {
                let result = self.remove_copy("stream deleted").await;
                if let Some(reply) = reply {
                    self.js
                        .respond(origin, reply, responses::delete_result(result));
                }
            }
        }
        Ok(())
    }

    /// A leader stepdown (`kind` names the response): one replica has
    /// nothing to hand over (nats-server answers success too, without
    /// reading the body); more hand leadership to the voter the body's
    /// `placement` prefers, or else to the one that has the most of the
    /// log (see [`stepdown`]).
    fn step_down(&mut self, origin: usize, reply: Option<Bytes>, payload: &[u8], kind: &str) {
        if self.handle.is_replicated() {
            let target = match self.step_down_target(payload) {
                Ok(Some(target)) => target,
                Ok(None) => {
                    self.answer_error(origin, reply, kind, &ApiError::cluster_unavailable());
                    return;
                }
                Err(error) => {
                    self.answer_error(origin, reply, kind, &error);
                    return;
                }
            };
            self.groups
                .with_node(self.core.group, |node| node.transfer_leadership(target));
        }
        if let Some(reply) = reply {
            self.js
                .respond(origin, reply, responses::success_response(kind));
        }
    }

    /// The voter a stepdown of this replicated stream hands leadership
    /// to; `None` when this replica does not lead or no voter can take it.
    fn step_down_target(&self, payload: &[u8]) -> Result<Option<u64>, ApiError> {
        let (leading, voters) = self.groups.node(self.core.group, |node| {
            (
                node.role() == tern_raft::Role::Leader,
                node.membership().voters.clone(),
            )
        });
        let (Some(this_node), Some(cluster), true) =
            (self.js.node_id(), self.js.cluster_name(), leading)
        else {
            return Ok(None);
        };
        let request = stepdown::StepdownRequest::parse(payload)?;
        let group = stepdown::StepdownGroup {
            this_node,
            voters: &voters,
            cluster: &cluster,
        };
        let target = stepdown::choose_target(request.placement.as_ref(), &group, |node| {
            self.js.peer_name(node)
        })?;
        Ok(self.groups.with_node(self.core.group, |node| match target {
            stepdown::StepdownTarget::Any => node.transfer_candidate(),
            stepdown::StepdownTarget::Preferred(voter) => node.transfer_candidate_preferring(voter),
        }))
    }

    pub(super) fn answer_error(
        &self,
        origin: usize,
        reply: Option<Bytes>,
        kind: &str,
        error: &ApiError,
    ) {
        self.js.answer_error(origin, reply, kind, error);
    }

    pub(super) fn fail_pending(&mut self, reason: &str) {
        let error = ApiError::store_failed(reason);
        let owed: Vec<OwedReply> = self.core.replica.leader.owed.drain(..).collect();
        for OwedReply { owed, .. } in owed {
            if let Owed::PubAck { reply } | Owed::Duplicate { reply, .. } = owed {
                self.js.publish_reply(
                    &reply,
                    responses::pub_ack_error(&self.handle.name, &error).as_bytes(),
                );
            }
        }
    }

    pub(super) fn info_response(&self, query: InfoQuery<'_>) -> String {
        let InfoQuery {
            kind,
            did_create,
            subjects_filter,
            offset,
            deleted_details,
            answer,
        } = query;
        let with_leader = answer != InfoAnswer::Config;
        let state = with_store!(&self.core.replica.state.store, log => log.state());
        let mut info_state = info_state(
            &state,
            self.core.replica.state.stored_last_unix_ns,
            &self.core.replica.state.config,
            self.core.replica.consumers.len(),
        );
        let mut paging = Some((0, 0, 0));
        if let Some(filter) = subjects_filter {
            let mut subjects: Vec<(String, u64)> = with_store!(&self.core.replica.state.store, log => log
                .subjects()
                .map(|(subject, _, _, count)| (String::from_utf8_lossy(subject).into_owned(), count))
                .filter(|(subject, _)| subject_matches(filter, subject))
                .collect());
            subjects.sort();
            let total = subjects.len();
            const SUBJECTS_LIMIT: usize = 100_000;
            let page: Vec<(String, u64)> = subjects
                .into_iter()
                .skip(offset)
                .take(SUBJECTS_LIMIT)
                .collect();
            info_state.subjects = Some(page);
            paging = Some((total, offset, SUBJECTS_LIMIT));
        }
        if deleted_details {
            info_state.deleted = Some(
                with_store!(&self.core.replica.state.store, log => log.deleted_sequences(usize::MAX)),
            );
        }
        responses::stream_info(
            kind,
            &self.core.replica.state.config,
            self.core.created_unix_ns,
            &info_state,
            now_unix_ns(),
            responses::InfoExtras {
                did_create,
                // INFO has it always; create and update answers in a
                // cluster (nats-server's are built with `clusterInfo`).
                cluster: (with_leader || self.js.is_clustered()).then(|| self.cluster_block()),
                paging: if with_leader { paging } else { None },
                // nats-server lists a stream without `_nats.level` and
                // `_nats.ver` (one server and a cluster alike).
                dynamic_metadata: answer != InfoAnswer::ListElement,
            },
        )
    }

    /// The `cluster` block of this stream's info (and its consumers'),
    /// as this replica sees it: on one server the leader alone; in a
    /// cluster its name, and for a replicated stream the leader its group
    /// knows and each other replica's progress (known on the leader,
    /// which answers INFO; a create or update may be answered by a
    /// follower).
    pub(super) fn cluster_block(&self) -> responses::ClusterBlock {
        let Some(cluster) = self.js.cluster_name() else {
            return responses::ClusterBlock {
                leader: Some(self.js.server_name()),
                ..responses::ClusterBlock::default()
            };
        };
        if !self.handle.is_replicated() {
            return responses::ClusterBlock {
                name: Some(cluster),
                leader: Some(self.js.server_name()),
                replicas: Vec::new(),
            };
        }
        self.groups
            .node(self.core.group, GroupView::of)
            .cluster_block(cluster, |node| self.js.peer_name(node))
    }

    pub(super) async fn find(&self, get: &MessageGet) -> Result<Option<StoredMessage>, StoreError> {
        let sequence = match get {
            MessageGet::Sequence(sequence) => Some(*sequence),
            MessageGet::LastBySubject(subject) => {
                with_store!(&self.core.replica.state.store, log => log.last_matching(|candidate| {
                    subject_matches(subject, &String::from_utf8_lossy(candidate))
                }))
            }
            MessageGet::NextBySubject {
                subject,
                from_sequence,
            } => {
                with_store!(&self.core.replica.state.store, log => log.next_matching((*from_sequence).max(1), |candidate| {
                    subject_matches(subject, &String::from_utf8_lossy(candidate))
                }))
            }
            MessageGet::StartTime { unix_ns, subject } => {
                match with_store!(&self.core.replica.state.store, log => log.first_at_or_after(*unix_ns))
                {
                    None => None,
                    Some(first) => match subject {
                        None => Some(first),
                        Some(subject) => {
                            with_store!(&self.core.replica.state.store, log => log.next_matching(first, |candidate| {
                                subject_matches(subject, &String::from_utf8_lossy(candidate))
                            }))
                        }
                    },
                }
            }
        };
        match sequence {
            None => Ok(None),
            Some(sequence) => self.read_message(sequence).await,
        }
    }

    /// Reads one stored message for a client. Every read is verified; one
    /// that fails its checks answers an error and, once the call is done,
    /// takes the stream offline (never a skipped or altered message).
    pub(super) async fn read_message(
        &self,
        sequence: u64,
    ) -> Result<Option<StoredMessage>, StoreError> {
        let read = with_store!(&self.core.replica.state.store, log => log.get(sequence).await);
        if let Err(error @ StoreError::Corrupt { .. }) = &read {
            self.read_damage
                .borrow_mut()
                .get_or_insert_with(|| error.clone());
        }
        read
    }

    pub(super) async fn direct_get(
        &self,
        origin: usize,
        reply: Bytes,
        subject: Option<Bytes>,
        payload: &[u8],
    ) {
        let parsed = match &subject {
            Some(subject) => requests::DirectGet::parse_subject_form(subject, payload),
            None => requests::DirectGet::parse(payload),
        };
        let get = match parsed {
            Ok(get) => get,
            Err(status) => {
                self.js
                    .respond_message(origin, reply, status_headers(&status), Bytes::new());
                return;
            }
        };
        if let Some(multi_last) = &get.multi_last {
            return self
                .direct_get_multi_last(origin, reply, multi_last, get.no_headers)
                .await;
        }
        if let Some(batch) = &get.batch {
            return self
                .direct_get_batch(origin, reply, &get.get, batch, get.no_headers)
                .await;
        }
        match self.find(&get.get).await {
            Ok(Some(message)) => {
                let (headers, payload) = self.direct_message(message, get.no_headers, None);
                self.js.respond_message(origin, reply, headers, payload);
            }
            Ok(None) => self.js.respond_message(
                origin,
                reply,
                status_headers("404 Message Not Found"),
                Bytes::new(),
            ),
            Err(error) => self.js.respond_message(
                origin,
                reply,
                status_headers(&format!("500 {error}")),
                Bytes::new(),
            ),
        }
    }

    /// A stored message as a direct-get reply: its headers followed by
    /// `Nats-Stream`, `Nats-Subject`, `Nats-Sequence`, `Nats-Time-Stamp`
    /// and, in a batch, `Nats-Num-Pending` and `Nats-Last-Sequence`.
    pub(super) fn direct_message(
        &self,
        message: StoredMessage,
        no_headers: bool,
        batch: Option<(u64, u64)>,
    ) -> (Bytes, Bytes) {
        let payload = Bytes::from(message.payload);
        if no_headers {
            return (Bytes::new(), payload);
        }
        let mut block = if message.headers.is_empty() {
            b"NATS/1.0\r\n".to_vec()
        } else {
            message.headers[..message.headers.len() - 2].to_vec()
        };
        let mut time = String::new();
        super::super::api::json::write_time(&mut time, message.timestamp_ns);
        let time = time.trim_matches('"');
        block.extend_from_slice(
            format!(
                "Nats-Stream: {}\r\nNats-Subject: {}\r\nNats-Sequence: {}\r\nNats-Time-Stamp: {time}\r\n",
                self.handle.name,
                String::from_utf8_lossy(&message.subject),
                message.sequence,
            )
            .as_bytes(),
        );
        if let Some((pending, previous)) = batch {
            block.extend_from_slice(
                format!("Nats-Num-Pending: {pending}\r\nNats-Last-Sequence: {previous}\r\n")
                    .as_bytes(),
            );
        }
        block.extend_from_slice(b"\r\n");
        (Bytes::from(block), payload)
    }

    /// Sends `sequences` (ascending) as a direct-get batch, as `batch` says.
    pub(super) async fn send_direct_batch(
        &self,
        origin: usize,
        reply: Bytes,
        sequences: &[u64],
        batch: DirectBatchReply,
    ) {
        let DirectBatchReply {
            messages_max,
            bytes_max,
            no_headers,
            up_to_sequence,
        } = batch;
        let total = sequences.len() as u64;
        let (mut sent, mut sent_bytes, mut previous) = (0u64, 0usize, 0u64);
        for &sequence in sequences.iter().take(messages_max.max(1)) {
            let message = match self.read_message(sequence).await {
                Ok(Some(message)) => message,
                Ok(None) => continue,
                Err(error) => {
                    let status = status_headers(&format!("500 {error}"));
                    return self.js.respond_message(origin, reply, status, Bytes::new());
                }
            };
            sent += 1;
            sent_bytes += message.subject.len() + message.headers.len() + message.payload.len();
            let (headers, payload) =
                self.direct_message(message, no_headers, Some((total - sent, previous)));
            self.js
                .respond_message(origin, reply.clone(), headers, payload);
            previous = sequence;
            if bytes_max > 0 && sent_bytes >= bytes_max {
                break;
            }
        }
        let mut end = format!(
            "NATS/1.0 204 EOB\r\nNats-Num-Pending: {}\r\nNats-Last-Sequence: {previous}\r\n",
            total - sent
        );
        if let Some(up_to) = up_to_sequence {
            end.push_str(&format!("Nats-UpTo-Sequence: {up_to}\r\n"));
        }
        end.push_str("\r\n");
        self.js
            .respond_message(origin, reply, Bytes::from(end), Bytes::new());
    }

    /// `{"seq"|"next_by_subj"|"start_time", "batch": N}`: consecutive
    /// matching messages from the start.
    pub(super) async fn direct_get_batch(
        &self,
        origin: usize,
        reply: Bytes,
        get: &MessageGet,
        batch: &requests::DirectBatch,
        no_headers: bool,
    ) {
        let (from, filter) = match get {
            MessageGet::Sequence(sequence) => (Some(*sequence), None),
            MessageGet::NextBySubject {
                subject,
                from_sequence,
            } => (Some(*from_sequence), Some(subject.as_str())),
            MessageGet::StartTime { unix_ns, subject } => (
                with_store!(&self.core.replica.state.store, log => log.first_at_or_after(*unix_ns)),
                subject.as_deref(),
            ),
            MessageGet::LastBySubject(_) => (None, None),
        };
        let mut sequences = Vec::new();
        if let Some(mut from) = from.map(|from| from.max(1)) {
            while let Some(next) = with_store!(&self.core.replica.state.store, log => log.next_matching(from, |subject| {
                filter.is_none_or(|filter| subject_matches(filter, &String::from_utf8_lossy(subject)))
            })) {
                sequences.push(next);
                from = next + 1;
            }
        }
        if sequences.is_empty() {
            let status = status_headers("404 Message Not Found");
            return self.js.respond_message(origin, reply, status, Bytes::new());
        }
        self.send_direct_batch(
            origin,
            reply,
            &sequences,
            DirectBatchReply {
                messages_max: batch.size,
                bytes_max: batch.max_bytes,
                no_headers,
                up_to_sequence: None,
            },
        )
        .await;
    }

    /// `{"multi_last": [subjects…]}`: the last message of every subject
    /// matching one of the filters, up to a sequence or time, in sequence
    /// order.
    pub(super) async fn direct_get_multi_last(
        &self,
        origin: usize,
        reply: Bytes,
        multi_last: &requests::DirectMultiLast,
        no_headers: bool,
    ) {
        let state = with_store!(&self.core.replica.state.store, log => log.state());
        let mut up_to = if multi_last.up_to_sequence > 0 {
            multi_last.up_to_sequence.min(state.last_sequence)
        } else {
            state.last_sequence
        };
        if let Some(unix_ns) = multi_last.up_to_unix_ns {
            up_to = match with_store!(&self.core.replica.state.store, log => log.first_at_or_after(unix_ns.saturating_add(1)))
            {
                Some(after) => up_to.min(after.saturating_sub(1)),
                None => up_to,
            };
        }
        let matches = |subject: &[u8]| {
            let subject = String::from_utf8_lossy(subject);
            multi_last
                .subjects
                .iter()
                .any(|filter| subject_matches(filter, &subject))
        };
        // Last sequence per matching subject, at most `up_to`.
        let mut last_per_subject: FxHashMap<Vec<u8>, u64> = FxHashMap::default();
        let mut from = state.first_sequence.max(1);
        while let Some(next) =
            with_store!(&self.core.replica.state.store, log => log.next_matching(from, matches))
        {
            if next > up_to {
                break;
            }
            if let Some(subject) =
                with_store!(&self.core.replica.state.store, log => log.subject_of(next))
            {
                last_per_subject.insert(subject.to_vec(), next);
            }
            from = next + 1;
        }
        let mut sequences: Vec<u64> = last_per_subject.into_values().collect();
        sequences.sort_unstable();
        if sequences.is_empty() {
            let status = status_headers("404 No Results");
            return self.js.respond_message(origin, reply, status, Bytes::new());
        }
        let limit = if multi_last.batch > 0 {
            multi_last.batch
        } else {
            sequences.len()
        };
        self.send_direct_batch(
            origin,
            reply,
            &sequences,
            DirectBatchReply {
                messages_max: limit,
                bytes_max: multi_last.max_bytes,
                no_headers,
                up_to_sequence: Some(up_to),
            },
        )
        .await;
    }
}

/// Stream info's `state` from the block store's, for a stream with
/// `config` and `consumers` consumers.
pub fn info_state(
    state: &StreamState,
    last_unix_ns: u64,
    config: &StreamConfig,
    consumers: usize,
) -> responses::StreamState {
    let empty = state.messages == 0;
    // A stream created with `first_seq` reports it before its first
    // message, with the sequence before it as the last (nats-server).
    let last_sequence = state
        .last_sequence
        .max(config.first_sequence.saturating_sub(1));
    responses::StreamState {
        messages: state.messages,
        bytes: state.bytes,
        // nats-server: 0 for a stream that never held a message, last + 1
        // once everything was removed.
        first_sequence: if empty && last_sequence == 0 {
            0
        } else if empty {
            last_sequence + 1
        } else {
            state.first_sequence
        },
        first_unix_ns: if empty { 0 } else { state.first_timestamp_ns },
        last_sequence,
        last_unix_ns: last_unix_ns.max(state.last_timestamp_ns),
        num_subjects: state.subjects,
        subjects: None,
        num_deleted: state.deleted,
        deleted: None,
        consumer_count: consumers as u64,
    }
}

pub(super) fn status_headers(status: &str) -> Bytes {
    Bytes::from(format!("NATS/1.0 {status}\r\n\r\n"))
}
