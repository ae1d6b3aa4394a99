//! Listings across nodes: STREAM.LIST and account INFO (`$JS.API.INFO`)
//! in a cluster, answered by the meta leader as nats-server's are
//! (`jsClusteredStreamListRequest`, `JetStreamUsage`).
//!
//! Both go to shard 0 of the meta leader's node (a node that does not
//! lead hands the request over, as STREAM.NAMES). Then:
//!
//! - STREAM.LIST: the page of names (offset, [`LIST_LIMIT`]) comes from
//!   the meta group's catalog; each stream is asked for its info through
//!   the ordinary STREAM.INFO path (to a node holding it, then to its
//!   leader), the reply going to this node's gather inbox. The leader's
//!   answer is the stream's list element (its `cluster` block included).
//!   A stream none of whose nodes a route reaches is listed as
//!   nats-server lists it, by hand: its config, an empty state and a
//!   `cluster` block with every replica offline. It, and every stream
//!   that did not answer within [`CLUSTER_GATHER_TIMEOUT`] or answered an
//!   error, is named in `missing`; one that answered it is offline also
//!   in `offline`, with the reason.
//! - INFO: every other voter a route reaches is asked for its node's
//!   usage ([`NODE_USAGE_TOKENS`]): the bytes of every replica it holds
//!   (so a three-replica stream counts three times, as nats-server sums
//!   each server's usage), the consumers of the streams it leads and its
//!   API counters. Streams and reservations are the catalog's.
//!
//! The gather inbox is `$JSC.R.<node id, hex>.<gather>.<slot>`: one
//! cluster-wide internal subscription on shard 0 of every clustered node,
//! so answers reach it from any shard of any node. The internal usage
//! request is honoured only when another node handed it over (a client's
//! request of that subject gets no answer, as any unknown API subject).

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use tern_shard::Waiters;

use super::api::error::ApiError;
use super::api::requests::NamesRequest;
use super::api::responses::{self, AccountInfo};
use super::replication;
use super::stream::config::StorageType;
use super::{now_unix_ns, ApiRequest, Gathered, JetStream, LIST_LIMIT};
use crate::internal::{InternalScope, InternalSubscription};

/// How long the meta leader waits for the answers (nats-server's 4 s).
pub const CLUSTER_GATHER_TIMEOUT: Duration = Duration::from_secs(4);
/// Gathers one node runs at once; a listing past them is answered 503
/// 10008 (the client retries).
pub const CLUSTER_GATHERS_MAX: usize = 16;
/// The gather inbox's prefix (see the module doc).
pub const GATHER_INBOX_PREFIX: &str = "$JSC.R.";
/// The tokens after `$JS.API.` of the meta leader's request for a node's
/// usage.
pub const NODE_USAGE_TOKENS: [&str; 3] = ["$TERN", "NODE", "USAGE"];

/// Answers awaited by one gather, by slot.
pub struct ClusterGather {
    answers: RefCell<Vec<Option<Bytes>>>,
    arrived: Waiters,
}

impl ClusterGather {
    fn answered(&self) -> usize {
        self.answers.borrow().iter().flatten().count()
    }
}

/// What one node tells the meta leader for account INFO.
#[derive(Debug, Default, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NodeUsage {
    /// Bytes of every memory and file replica on the node.
    pub memory: u64,
    pub storage: u64,
    /// Consumers of the streams the node leads.
    pub consumers: u64,
    pub api_total: u64,
    pub api_errors: u64,
}

impl NodeUsage {
    /// A node's usage from its shards' parts.
    pub fn of(parts: &[Gathered]) -> NodeUsage {
        let mut usage = NodeUsage::default();
        for part in parts {
            usage.api_total += part.api_total;
            usage.api_errors += part.api_errors;
            for stream in &part.streams {
                match stream.config.storage {
                    StorageType::Memory => usage.memory += stream.state.bytes,
                    StorageType::File => usage.storage += stream.state.bytes,
                }
                // A follower's replica knows the durables too: counted
                // once, where the stream is led.
                if stream.leading {
                    usage.consumers += stream.consumers as u64;
                }
            }
        }
        usage
    }

    fn add(&mut self, other: &NodeUsage) {
        self.memory += other.memory;
        self.storage += other.storage;
        self.consumers += other.consumers;
        self.api_total += other.api_total;
        self.api_errors += other.api_errors;
    }
}

/// How one stream of a STREAM.LIST page ended.
enum Listed {
    /// Its list element.
    Element(String),
    /// Listed by hand (none of its nodes reachable) and named missing.
    Unreachable(String),
    /// Answered that it is offline: the reason.
    Offline(String),
    /// No answer in time, or an error.
    Missing,
}

/// What an answer to a gathered STREAM.INFO says.
fn listed_from(answer: Option<&Bytes>) -> Listed {
    let Some(body) = answer.and_then(|body| std::str::from_utf8(body).ok()) else {
        return Listed::Missing;
    };
    if let Some(element) = responses::list_element_of_info(body) {
        return Listed::Element(element);
    }
    let error = serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|value| value.get("error").cloned());
    let offline = error.as_ref().and_then(|error| {
        let code = error.get("err_code")?.as_u64()?;
        let description = error.get("description")?.as_str()?;
        (code == u64::from(ApiError::stream_offline("").code)).then(|| {
            description
                .strip_prefix("stream is offline: ")
                .unwrap_or(description)
                .to_string()
        })
    });
    match offline {
        Some(reason) => Listed::Offline(reason),
        None => Listed::Missing,
    }
}

impl JetStream {
    /// Shard 0 of a clustered node: subscribes its gather inbox, which
    /// other nodes route here.
    pub(super) fn subscribe_gather_inbox(&self, node: u64) {
        let subscription = Rc::new(InternalSubscription::new(
            Bytes::from(format!("{GATHER_INBOX_PREFIX}{node:x}.>")),
            InternalScope::Cluster,
            self.sink(super::sink::Role::GatherReply),
        ));
        let shard = self.shard();
        let update = shard
            .routing
            .router
            .borrow_mut()
            .add_internal(&subscription)
            .expect("a valid subject");
        if let Some(update) = update {
            shard.routing.broadcast_interest(update);
        }
        shard.routing.export_interest();
        *self.gather_inbox.borrow_mut() = Some(subscription);
    }

    /// Whether `reply` is a node's gather inbox (the request is the meta
    /// leader's, not a client's: not counted in the API statistics).
    pub(super) fn is_gather_reply(reply: Option<&[u8]>) -> bool {
        reply.is_some_and(|reply| reply.starts_with(GATHER_INBOX_PREFIX.as_bytes()))
    }

    /// An answer reached this node's gather inbox.
    pub fn on_gather_reply(&self, subject: &[u8], payload: &[u8]) {
        let Some(rest) = subject.strip_prefix(GATHER_INBOX_PREFIX.as_bytes()) else {
            return;
        };
        let text = String::from_utf8_lossy(rest);
        let mut tokens = text.split('.').skip(1);
        let (Some(id), Some(slot), None) = (tokens.next(), tokens.next(), tokens.next()) else {
            return;
        };
        let (Ok(id), Ok(slot)) = (id.parse::<u64>(), slot.parse::<usize>()) else {
            return;
        };
        let gather = self.cluster_gathers.borrow().get(&id).cloned();
        let Some(gather) = gather else {
            return; // Late: the gather ended.
        };
        let mut answers = gather.answers.borrow_mut();
        if let Some(answer @ None) = answers.get_mut(slot) {
            *answer = Some(Bytes::copy_from_slice(payload));
            drop(answers);
            gather.arrived.wake_all();
        }
    }

    /// Starts a gather of `slots` answers; `None` while
    /// [`CLUSTER_GATHERS_MAX`] run.
    fn open_cluster_gather(&self, slots: usize) -> Option<(u64, Rc<ClusterGather>)> {
        let mut gathers = self.cluster_gathers.borrow_mut();
        if gathers.len() >= CLUSTER_GATHERS_MAX {
            return None;
        }
        let id = self.next_gather.get();
        self.next_gather.set(id + 1);
        let gather = Rc::new(ClusterGather {
            answers: RefCell::new(vec![None; slots]),
            arrived: Waiters::new(),
        });
        gathers.insert(id, gather.clone());
        Some((id, gather))
    }

    /// The inbox of `slot` of gather `id` on this node.
    fn gather_inbox_of(&self, id: u64, slot: usize) -> Bytes {
        let node = self.node_id().expect("clustered");
        Bytes::from(format!("{GATHER_INBOX_PREFIX}{node:x}.{id}.{slot}"))
    }

    /// Waits until `expected` answers arrived or [`CLUSTER_GATHER_TIMEOUT`]
    /// passed; the answers by slot.
    async fn finish_cluster_gather(
        &self,
        id: u64,
        gather: &ClusterGather,
        expected: usize,
    ) -> Vec<Option<Bytes>> {
        let all = gather.arrived.wait_until(|| gather.answered() >= expected);
        let _ = tern_shard::timer::timeout(CLUSTER_GATHER_TIMEOUT, all).await;
        self.cluster_gathers.borrow_mut().remove(&id);
        std::mem::take(&mut *gather.answers.borrow_mut())
    }

    /// Whether no route reaches any of `peers` (and none is this node).
    fn unreachable(&self, peers: &[u64]) -> bool {
        let this = self.node_id();
        let shard = self.shard();
        let Some(routes) = shard.routes.as_ref() else {
            return false;
        };
        peers
            .iter()
            .all(|&peer| Some(peer) != this && routes.link_to_node(peer).is_none())
    }

    /// STREAM.LIST in a cluster, on shard 0.
    pub(super) fn cluster_list(self: &Rc<Self>, request: ApiRequest) {
        let kind = "stream_list_response";
        if !self.served_by_meta_leader(&request, kind) {
            return;
        }
        let parsed = match NamesRequest::parse_list(&request.payload) {
            Ok(parsed) => parsed,
            Err(error) => return self.answer_error(request.origin, request.reply, kind, &error),
        };
        let Some(reply) = request.reply else {
            return;
        };
        let Some(meta) = self.meta.get().cloned() else {
            return;
        };
        // The page, as the catalog has it now.
        let streams = meta.streams_listed_for(parsed.subject.as_deref());
        let total = streams.len();
        let offset = parsed.offset.min(total);
        let page: Vec<_> = streams.into_iter().skip(offset).take(LIST_LIMIT).collect();
        if page.is_empty() {
            // nats-server answers an empty page with a zero total.
            let body = responses::list_response_with_missing(0, offset, LIST_LIMIT, &[], &[], &[]);
            return self.respond(request.origin, reply, body);
        }
        let Some((id, gather)) = self.open_cluster_gather(page.len()) else {
            return self.answer_error(
                request.origin,
                Some(reply),
                kind,
                &ApiError::cluster_unavailable(),
            );
        };
        let cluster = self.cluster_name().unwrap_or_default();
        let mut listed: Vec<Option<Listed>> = Vec::with_capacity(page.len());
        let mut sent = 0;
        for (slot, (name, config, placement)) in page.iter().enumerate() {
            if self.unreachable(&placement.peers) {
                let block =
                    replication::offline_cluster_block(cluster.clone(), &placement.peers, |node| {
                        self.peer_name(node)
                    });
                listed.push(Some(Listed::Unreachable(
                    responses::offline_stream_info_object(
                        config,
                        placement.created_unix_ns,
                        &block,
                        now_unix_ns(),
                    ),
                )));
                continue;
            }
            listed.push(None);
            sent += 1;
            // The client's path: to a node holding it, then its leader.
            self.dispatch_api(ApiRequest {
                origin: self.index,
                subject: Bytes::from(format!("$JS.API.STREAM.INFO.{name}")),
                reply: Some(self.gather_inbox_of(id, slot)),
                payload: Bytes::new(),
                hops: 0,
            });
        }
        let js = self.clone();
        let names: Vec<String> = page.into_iter().map(|(name, _, _)| name).collect();
        glommio::spawn_local(async move {
            let answers = js.finish_cluster_gather(id, &gather, sent).await;
            let mut elements = Vec::new();
            let mut missing = Vec::new();
            let mut offline = Vec::new();
            for ((name, listed), answer) in names.into_iter().zip(listed).zip(answers) {
                match listed.unwrap_or_else(|| listed_from(answer.as_ref())) {
                    Listed::Element(element) => elements.push(element),
                    Listed::Unreachable(element) => {
                        elements.push(element);
                        missing.push(name);
                    }
                    Listed::Offline(reason) => {
                        missing.push(name.clone());
                        offline.push((name, reason));
                    }
                    Listed::Missing => missing.push(name),
                }
            }
            let body = responses::list_response_with_missing(
                total, offset, LIST_LIMIT, &elements, &missing, &offline,
            );
            js.respond(request.origin, reply, body);
        })
        .detach();
    }

    /// Account INFO in a cluster, on shard 0.
    pub(super) fn cluster_account_info(self: &Rc<Self>, request: ApiRequest) {
        let kind = "account_info_response";
        if !self.served_by_meta_leader(&request, kind) {
            return;
        }
        let Some(reply) = request.reply else {
            return;
        };
        let Some(meta) = self.meta.get().cloned() else {
            return;
        };
        let Some(others) = self.ask_node_usage() else {
            return self.answer_error(
                request.origin,
                Some(reply),
                kind,
                &ApiError::cluster_unavailable(),
            );
        };
        let js = self.clone();
        glommio::spawn_local(async move {
            let mut usage = NodeUsage::of(&js.gather().await);
            usage.add(&others.await);
            let mut info = AccountInfo {
                memory: usage.memory,
                storage: usage.storage,
                consumers: usage.consumers as usize,
                api_total: usage.api_total,
                api_errors: usage.api_errors,
                ..AccountInfo::default()
            };
            for (_, config, _) in meta.streams_listed_for(None) {
                info.streams += 1;
                let reserved = config.max_bytes.max(0) as u64;
                match config.storage {
                    StorageType::Memory => info.reserved_memory += reserved,
                    StorageType::File => info.reserved_storage += reserved,
                }
            }
            // nats-server counts a request once it is answered: not this one.
            info.api_total = info.api_total.saturating_sub(1);
            js.respond(
                request.origin,
                reply,
                responses::account_info_response(&info),
            );
        })
        .detach();
    }

    /// Asks every other voter a route reaches for its node's usage
    /// ([`NODE_USAGE_TOKENS`]); the returned future sums the answers (a
    /// node that does not answer within [`CLUSTER_GATHER_TIMEOUT`] adds
    /// nothing). `None` while [`CLUSTER_GATHERS_MAX`] gathers run. Shard
    /// 0 of a clustered node.
    pub(super) fn ask_node_usage(
        self: &Rc<Self>,
    ) -> Option<impl std::future::Future<Output = NodeUsage>> {
        let meta = self.meta.get().cloned()?;
        let this = self.node_id();
        let others: Vec<u64> = {
            let shard = self.shard();
            let routes = shard.routes.as_ref()?;
            meta.voters()
                .into_iter()
                .filter(|&node| Some(node) != this && routes.link_to_node(node).is_some())
                .collect()
        };
        let (id, gather) = self.open_cluster_gather(others.len())?;
        let subject = format!("$JS.API.{}", NODE_USAGE_TOKENS.join("."));
        for (slot, &node) in others.iter().enumerate() {
            let asked = ApiRequest {
                origin: self.index,
                subject: Bytes::from(subject.clone()),
                reply: Some(self.gather_inbox_of(id, slot)),
                payload: Bytes::new(),
                hops: 0,
            };
            // No route now: its 503 lands in the inbox and counts as no
            // usage.
            self.hand_to(node, &asked, "account_info_response");
        }
        let js = self.clone();
        Some(async move {
            let mut usage = NodeUsage::default();
            for answer in js.finish_cluster_gather(id, &gather, others.len()).await {
                let node_usage = answer
                    .and_then(|body| serde_json::from_slice::<NodeUsage>(&body).ok())
                    .unwrap_or_default();
                usage.add(&node_usage);
            }
            usage
        })
    }

    /// The account's usage as nats-server's `/jsz` account detail reports
    /// it: this node's (from its shards' `parts`) and, in a cluster with
    /// `cluster_wide`, every other node's a route reaches (each replica
    /// counted where it is, as nats-server sums every server's usage of
    /// the account). Shard 0.
    pub async fn account_usage(
        self: &Rc<Self>,
        parts: &[Gathered],
        cluster_wide: bool,
    ) -> NodeUsage {
        let mut usage = NodeUsage::of(parts);
        if cluster_wide && self.is_clustered() {
            if let Some(others) = self.ask_node_usage() {
                usage.add(&others.await);
            }
        }
        usage
    }

    /// The meta leader asked this node for its usage (shard 0).
    pub(super) fn answer_node_usage(self: &Rc<Self>, request: ApiRequest) {
        let Some(reply) = request.reply else {
            return;
        };
        let js = self.clone();
        glommio::spawn_local(async move {
            let usage = NodeUsage::of(&js.gather().await);
            let body = serde_json::to_string(&usage).expect("plain numbers");
            js.respond(request.origin, reply, body);
        })
        .detach();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jetstream::api::responses::{stream_info, ApiReply, InfoExtras, StreamState};
    use crate::jetstream::stream::config::StreamConfig;
    use crate::jetstream::StreamSummary;

    #[test]
    fn answers_are_elements_offline_streams_or_missing() {
        let config = StreamConfig {
            name: "S".into(),
            ..StreamConfig::default()
        };
        let info = stream_info(
            "stream_info_response",
            &config,
            0,
            &StreamState::default(),
            0,
            InfoExtras {
                paging: Some((0, 0, 0)),
                ..InfoExtras::default()
            },
        );
        assert!(matches!(
            listed_from(Some(&Bytes::from(info))),
            Listed::Element(element) if element.starts_with("{\"config\":{\"name\":\"S\"")
        ));
        let offline = ApiReply::error(
            "stream_info_response",
            &ApiError::stream_offline("journal damaged"),
        )
        .into_body();
        assert!(matches!(
            listed_from(Some(&Bytes::from(offline))),
            Listed::Offline(reason) if reason == "journal damaged"
        ));
        let unavailable =
            ApiReply::error("stream_info_response", &ApiError::cluster_unavailable()).into_body();
        assert!(matches!(
            listed_from(Some(&Bytes::from(unavailable))),
            Listed::Missing
        ));
        assert!(matches!(listed_from(None), Listed::Missing));
    }

    #[test]
    fn a_node_counts_every_replica_and_the_consumers_it_leads() {
        let stream = |storage, bytes, consumers, leading| StreamSummary {
            name: "S".into(),
            config: Box::new(StreamConfig {
                storage,
                ..StreamConfig::default()
            }),
            created_unix_ns: 0,
            state: tern_storage::block_store::StreamState {
                bytes,
                ..Default::default()
            },
            last_unix_ns: 0,
            shard: 0,
            failure: None,
            consumers,
            leading,
            group: 1,
            replicated: false,
        };
        let parts = [
            Gathered {
                streams: vec![
                    stream(StorageType::File, 100, 2, true),
                    stream(StorageType::File, 40, 2, false),
                ],
                api_total: 5,
                api_errors: 1,
                ..Gathered::default()
            },
            Gathered {
                shard: 1,
                streams: vec![stream(StorageType::Memory, 7, 1, false)],
                api_total: 2,
                ..Gathered::default()
            },
        ];
        let usage = NodeUsage::of(&parts);
        assert_eq!(
            usage,
            NodeUsage {
                memory: 7,
                storage: 140,
                consumers: 2,
                api_total: 7,
                api_errors: 1,
            }
        );
        let json = serde_json::to_string(&usage).unwrap();
        assert_eq!(serde_json::from_str::<NodeUsage>(&json).unwrap(), usage);
    }
}
