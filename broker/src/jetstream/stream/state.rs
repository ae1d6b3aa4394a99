//! A stream's replicated state and the one function that changes it:
//! [`ReplicatedState::apply`], deterministic on every replica. It holds the
//! block store, the config in force, the TTL notes and the durable
//! consumers as the log has them ([`LoggedConsumer`]: config and last
//! delivery state applied), and reads no clock, no randomness and nothing
//! of the leader: the same log applied to the same store gives
//! byte-identical state. The leader's live consumers are not in it; apply
//! only keeps their pending counts ([`ConsumerLeader`]). What an entry's apply means for
//! clients (PubAcks, API answers, subscriptions following a config, live
//! consumers following the log) is the host's, from the [`Applied`] it
//! returns.

use std::collections::BTreeMap;
use std::rc::Rc;

use bytes::Bytes;
use tern_storage::block_store::{NewMessage, StoreError};

use super::super::consumer::delivery::DeliveryState;
use super::super::entry::Operation;
use super::super::expiry::Expiry;
use super::super::headers;
use super::config::{subject_matches, StorageType, StreamConfig};
use super::consumer_leader::ConsumerLeader;
use super::{file_message_bytes, memory_message_bytes, Store};

/// What the replicas of a stream hold identically.
pub(super) struct ReplicatedState {
    pub(super) store: Store,
    pub(super) config: Rc<StreamConfig>,
    /// TTLs and delete markers; `Some` while the stream allows message TTLs.
    pub(super) expiry: Option<Expiry>,
    /// The durable consumers the log created, by name: identical on every
    /// replica at one applied index.
    pub(super) logged_consumers: BTreeMap<String, LoggedConsumer>,
    /// Time of the last message applied (info's `last_ts`, kept after it
    /// is removed, as nats-server does until a restart).
    pub(super) stored_last_unix_ns: u64,
    pub(super) applied_index: u64,
    pub(super) applied_term: u64,
    pub(super) applied_bytes_since_checkpoint: u64,
    /// Canary only (`StreamCanary::LimitEvictsNewest`): max_msgs and
    /// max_bytes evict the newest message instead of the oldest. Still
    /// the same on every replica, but it breaks what a snapshot read while
    /// entries apply relies on (docs/stream-snapshots.md).
    pub(super) evict_newest: bool,
}

/// A durable consumer as the log holds it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LoggedConsumer {
    pub created_unix_ns: u64,
    /// Its config's stored JSON (the last create or update applied).
    pub config_json: Bytes,
    /// The last delivery state applied ([`DeliveryState::encode`]): the
    /// initial one at its start sequence until a state entry applies.
    pub delivery_state: Bytes,
}

/// What applying one operation did, for the task to answer.
#[derive(Debug)]
pub(super) enum Applied {
    /// A message entry: its sequence (already stored when replayed).
    Message {
        sequence: u64,
    },
    Purged {
        count: u64,
    },
    /// A delete: whether the message was there.
    Deleted {
        removed: bool,
    },
    Expired,
    /// A config entry; `changed_from` the config it replaced, `None` when
    /// it was the same (a replay).
    Config {
        changed_from: Option<Rc<StreamConfig>>,
    },
    /// A durable consumer was created starting at `start_sequence`, or
    /// its config updated.
    ConsumerCreated {
        name: String,
        start_sequence: u64,
    },
    /// A durable consumer's delete (applied whether or not it existed).
    ConsumerDeleted {
        name: String,
    },
    /// A durable consumer's delivery state (a state entry after its
    /// delete changes nothing).
    ConsumerState {
        name: String,
    },
}

impl ReplicatedState {
    /// Nothing applied yet, on `store`, with `config` in force.
    pub(super) fn new(store: Store, config: Rc<StreamConfig>) -> ReplicatedState {
        ReplicatedState {
            store,
            config,
            expiry: None,
            logged_consumers: BTreeMap::new(),
            stored_last_unix_ns: 0,
            applied_index: 0,
            applied_term: 0,
            applied_bytes_since_checkpoint: 0,
            evict_newest: false,
        }
    }

    /// Applies one operation.
    /// `consumers`: the leader's live consumers, whose pending counts
    /// follow what is stored and removed (none on a follower).
    pub(super) async fn apply(
        &mut self,
        operation: Operation,
        consumers: &mut ConsumerLeader,
    ) -> Result<Applied, StoreError> {
        match operation {
            Operation::Message {
                sequence,
                timestamp_ns,
                subject,
                headers: header_block,
                payload,
                retained,
            } => {
                let stored_last = with_store!(&self.store, log => log.last_sequence());
                let bytes = self.message_bytes(subject.len(), header_block.len(), payload.len());
                self.stored_last_unix_ns = self.stored_last_unix_ns.max(timestamp_ns);
                if sequence <= stored_last {
                    // Replayed after a checkpoint: already stored.
                    return Ok(Applied::Message { sequence });
                }
                with_store!(&mut self.store, log => log.append(NewMessage {
                    sequence,
                    timestamp_ns,
                    subject: &subject,
                    headers: &header_block,
                    payload: &payload,
                }).await)?;
                self.applied_bytes_since_checkpoint += bytes;
                self.stored_last_unix_ns = timestamp_ns;
                if let Some(expiry) = &mut self.expiry {
                    expiry.track(sequence, timestamp_ns, &header_block);
                }
                if !consumers.is_empty() {
                    consumers.saw(&subject);
                }
                if !retained {
                    // Nobody was interested when the leader accepted it:
                    // the sequence is used, the message is not kept
                    // (nats-server). Stored and deleted so the sequence
                    // survives a restart.
                    self.delete_message(sequence, consumers);
                    return Ok(Applied::Message { sequence });
                }
                if let Some(rollup) = headers::value(&header_block, headers::ROLLUP) {
                    if self.config.allow_rollup_hdrs {
                        if rollup == b"all" {
                            self.remove_below(sequence, consumers, |_| true);
                        } else if rollup == b"sub" {
                            let subject = subject.clone();
                            self.remove_below(sequence, consumers, move |candidate| {
                                candidate == &subject[..]
                            });
                        }
                    }
                }
                self.enforce_subject_limit(&subject, consumers);
                self.enforce_count_limits(consumers);
                Ok(Applied::Message { sequence })
            }
            Operation::Purge {
                last,
                filter,
                sequence,
                keep,
            } => {
                let count = self
                    .purge(last, filter.as_deref(), sequence, keep, consumers)
                    .await?;
                Ok(Applied::Purged { count })
            }
            Operation::Config { json } => {
                let config = match StreamConfig::from_stored_json(&json) {
                    Ok(config) => config,
                    Err(error) => panic!(
                        "stream {}: a config entry that does not decode: {error}",
                        self.config.name
                    ),
                };
                let changed_from = self.apply_config(config, consumers).await?;
                Ok(Applied::Config { changed_from })
            }
            Operation::Delete { sequence, .. } => Ok(Applied::Deleted {
                removed: self.delete_message(sequence, consumers),
            }),
            Operation::Expire { sequences } => {
                for sequence in sequences {
                    self.delete_message(sequence, consumers);
                }
                Ok(Applied::Expired)
            }
            Operation::ConsumerCreate {
                name,
                created_unix_ns,
                start_sequence,
                json,
            } => {
                // Sequences start at 1 (a start of 0 is the stream's first).
                let start_sequence = start_sequence.max(1);
                match self.logged_consumers.get_mut(&name) {
                    Some(logged) => logged.config_json = json,
                    None => {
                        self.logged_consumers.insert(
                            name.clone(),
                            LoggedConsumer {
                                created_unix_ns,
                                config_json: json,
                                delivery_state: Bytes::from(DeliveryState::initial_encoding(
                                    start_sequence,
                                )),
                            },
                        );
                    }
                }
                Ok(Applied::ConsumerCreated {
                    name,
                    start_sequence,
                })
            }
            Operation::ConsumerDelete { name } => {
                self.logged_consumers.remove(&name);
                Ok(Applied::ConsumerDeleted { name })
            }
            Operation::ConsumerState { name, state } => {
                if let Some(logged) = self.logged_consumers.get_mut(&name) {
                    logged.delivery_state = state;
                }
                Ok(Applied::ConsumerState { name })
            }
        }
    }

    /// Runs with `config` from now on; returns the one it replaced (`None`:
    /// the same config again, as a replay brings it, changes nothing).
    /// Count and size limits follow from the state and apply at once; age
    /// is the leader's to decide.
    async fn apply_config(
        &mut self,
        config: StreamConfig,
        consumers: &mut ConsumerLeader,
    ) -> Result<Option<Rc<StreamConfig>>, StoreError> {
        if config.to_stored_json() == self.config.to_stored_json() {
            return Ok(None);
        }
        let old = std::mem::replace(&mut self.config, Rc::new(config));
        if old.allow_msg_ttl != self.config.allow_msg_ttl {
            self.rebuild_expiry().await?;
        }
        self.enforce_size_limits(consumers);
        Ok(Some(old))
    }

    /// TTLs, `never` exemptions and markers, read back from the store when
    /// the stream allows message TTLs (nats-server rebuilds its wheel too).
    pub(super) async fn rebuild_expiry(&mut self) -> Result<(), StoreError> {
        if !self.config.allow_msg_ttl {
            self.expiry = None;
            return Ok(());
        }
        let mut expiry = Expiry::default();
        with_store!(&self.store, log => log.replay(0, |message| {
            expiry.track(message.sequence, message.timestamp_ns, message.headers);
        }).await)?;
        self.expiry = Some(expiry);
        Ok(())
    }

    pub(super) fn message_bytes(&self, subject: usize, headers: usize, payload: usize) -> u64 {
        let account = match self.config.storage {
            StorageType::File => file_message_bytes,
            StorageType::Memory => memory_message_bytes,
        };
        account(subject, headers, payload)
    }

    /// Removes one message from the store and its expiry notes (every
    /// removal but a purge's floor move comes here, so no note outlives its
    /// message); consumers that had it ahead of them count one pending
    /// message less. Returns whether it was there.
    pub(super) fn delete_message(&mut self, sequence: u64, consumers: &mut ConsumerLeader) -> bool {
        if let Some(expiry) = &mut self.expiry {
            expiry.removed(sequence);
        }
        self.delete_stored(sequence, consumers)
    }

    /// [`Self::delete_message`] without the expiry notes.
    fn delete_stored(&mut self, sequence: u64, consumers: &mut ConsumerLeader) -> bool {
        if consumers.is_empty() {
            return with_store!(&mut self.store, log => log.delete(sequence));
        }
        let Some(subject) =
            with_store!(&self.store, log => log.subject_of(sequence).map(<[u8]>::to_vec))
        else {
            return false;
        };
        let removed = with_store!(&mut self.store, log => log.delete(sequence));
        if removed {
            consumers.lost(sequence, &subject);
        }
        removed
    }

    /// Deletes live messages below `sequence` whose subject satisfies `matches`.
    pub(super) fn remove_below(
        &mut self,
        sequence: u64,
        consumers: &mut ConsumerLeader,
        mut matches: impl FnMut(&[u8]) -> bool,
    ) -> u64 {
        let mut removed = 0;
        let mut from = with_store!(&self.store, log => log.state()).first_sequence;
        while let Some(next) =
            with_store!(&self.store, log => log.next_matching(from, &mut matches))
        {
            if next >= sequence {
                break;
            }
            if self.delete_message(next, consumers) {
                removed += 1;
            }
            from = next + 1;
        }
        removed
    }

    fn enforce_subject_limit(&mut self, subject: &[u8], consumers: &mut ConsumerLeader) {
        let max = self.config.max_msgs_per_subject;
        if max <= 0 {
            return;
        }
        while let Some((first, _, count)) =
            with_store!(&self.store, log => log.subject_state(subject))
        {
            if count <= max as u64 {
                break;
            }
            self.delete_message(first, consumers);
        }
    }

    /// Discard old: evicts from the head while over max_msgs or max_bytes.
    fn enforce_count_limits(&mut self, consumers: &mut ConsumerLeader) {
        let (max_messages, max_bytes) = (self.config.max_msgs, self.config.max_bytes);
        if max_messages <= 0 && max_bytes <= 0 {
            return;
        }
        loop {
            let state = with_store!(&self.store, log => log.state());
            let over = (max_messages > 0 && state.messages > max_messages as u64)
                || (max_bytes > 0 && state.bytes > max_bytes as u64);
            if !over || state.messages == 0 {
                break;
            }
            let evicted = if self.evict_newest {
                with_store!(&self.store, log => log.last_matching(|_| true))
                    .unwrap_or(state.first_sequence)
            } else {
                state.first_sequence
            };
            self.delete_message(evicted, consumers);
        }
    }

    /// The limits that follow from the state alone (messages, bytes, per
    /// subject): applied deterministically, on every replica.
    pub(super) fn enforce_size_limits(&mut self, consumers: &mut ConsumerLeader) {
        self.enforce_count_limits(consumers);
        if self.config.max_msgs_per_subject > 0 {
            let subjects: Vec<Vec<u8>> = with_store!(&self.store, log => log
                .subjects()
                .filter(|(.., count)| *count > self.config.max_msgs_per_subject as u64)
                .map(|(subject, ..)| subject.to_vec())
                .collect());
            for subject in subjects {
                self.enforce_subject_limit(&subject, consumers);
            }
        }
    }

    /// Purges messages up to `last` (see [`Operation::Purge`]).
    async fn purge(
        &mut self,
        last: u64,
        filter: Option<&[u8]>,
        below: Option<u64>,
        keep: Option<u64>,
        consumers: &mut ConsumerLeader,
    ) -> Result<u64, StoreError> {
        let state = with_store!(&self.store, log => log.state());
        let filter_text = filter.map(|filter| String::from_utf8_lossy(filter).into_owned());
        let whole = filter_text
            .as_deref()
            .is_none_or(|filter| filter == ">" || filter.is_empty());
        let bound = below.unwrap_or(u64::MAX).min(last.saturating_add(1));
        if whole && keep.is_none() {
            // Everything below the bound: a floor move.
            let before = state.messages;
            if !consumers.is_empty() {
                consumers.lose_below(&self.store, bound);
            }
            with_store!(&mut self.store, log => log.purge_below(bound).await)?;
            if let Some(expiry) = &mut self.expiry {
                expiry.retain(|sequence| sequence >= bound);
            }
            let after = with_store!(&self.store, log => log.state()).messages;
            return Ok(before - after);
        }
        let matches = |subject: &[u8]| match &filter_text {
            None => true,
            Some(filter) => subject_matches(filter, &String::from_utf8_lossy(subject)),
        };
        let mut limit = bound;
        if let Some(keep) = keep {
            // Keep the newest `keep` matching: find the sequence to stop at.
            let mut matching = Vec::new();
            let mut from = state.first_sequence;
            while let Some(next) = with_store!(&self.store, log => log.next_matching(from, matches))
            {
                if next > last {
                    break;
                }
                matching.push(next);
                from = next + 1;
            }
            let keep = keep as usize;
            if matching.len() <= keep {
                return Ok(0);
            }
            // Keeping none (the API never sends 0, a log entry may hold it)
            // removes every match up to the bound.
            if keep > 0 {
                limit = limit.min(matching[matching.len() - keep]);
            }
        }
        Ok(self.remove_below(limit, consumers, matches))
    }
}

#[cfg(test)]
pub(super) mod tests {
    use std::collections::BTreeMap;

    use bytes::Bytes;
    use futures_lite::future::block_on;
    use tern_storage::block_store::{Manifest, MemoryFiles, StreamLog};

    use super::super::config as stream_config;
    use super::*;

    const SUBJECTS: [&str; 3] = ["s.a", "s.b", "s.c"];

    /// What the stream should hold: sequence -> (subject, payload).
    type Model = BTreeMap<u64, (String, Vec<u8>)>;

    /// What the log made of the durable consumers: name -> (created,
    /// config, delivery state).
    type ConsumersModel = BTreeMap<String, (u64, Bytes, Bytes)>;

    const CONSUMERS: [&str; 2] = ["C1", "C2"];

    /// The model's view of a consumer operation: a create keeps the first
    /// created time and the state, an update replaces the config; a state
    /// entry after a delete changes nothing.
    fn model_consumers(model: &mut ConsumersModel, operation: &Operation) {
        match operation {
            Operation::ConsumerCreate {
                name,
                created_unix_ns,
                start_sequence,
                json,
            } => {
                let initial =
                    Bytes::from(DeliveryState::initial_encoding((*start_sequence).max(1)));
                model
                    .entry(name.clone())
                    .and_modify(|(_, config, _)| *config = json.clone())
                    .or_insert((*created_unix_ns, json.clone(), initial));
            }
            Operation::ConsumerDelete { name } => {
                model.remove(name);
            }
            Operation::ConsumerState { name, state } => {
                if let Some((_, _, current)) = model.get_mut(name) {
                    *current = state.clone();
                }
            }
            _ => {}
        }
    }

    pub(in super::super) fn config(extra: &str) -> StreamConfig {
        let body = format!(
            r#"{{"name":"S","subjects":["s.>"],"storage":"memory","allow_rollup_hdrs":true{extra}}}"#
        );
        stream_config::parse("S", body.as_bytes(), true).expect("a valid config")
    }

    fn replica(config: StreamConfig) -> ReplicatedState {
        let store_config = tern_storage::block_store::StreamConfig {
            message_bytes: memory_message_bytes,
            // Synced appends need no executor for write-behind.
            sync: true,
            ..tern_storage::block_store::StreamConfig::default()
        };
        let (log, _) = block_on(StreamLog::open(
            MemoryFiles::new(),
            store_config,
            &Manifest::new(1),
        ))
        .expect("an empty memory store opens");
        ReplicatedState::new(Store::Memory(log), Rc::new(config))
    }

    /// A stored message: sequence, time, subject, headers, payload.
    type Stored = (u64, u64, String, Vec<u8>, Vec<u8>);

    /// Everything the replica stores, in sequence order.
    fn contents(state: &ReplicatedState) -> Vec<Stored> {
        let Store::Memory(log) = &state.store else {
            unreachable!("tests use memory stores")
        };
        let mut found = Vec::new();
        let mut from = 0;
        while let Some(sequence) = log.next_matching(from, |_| true) {
            let message = block_on(log.get(sequence)).expect("reads").expect("listed");
            found.push((
                sequence,
                message.timestamp_ns,
                String::from_utf8(message.subject).expect("utf-8"),
                message.headers,
                message.payload,
            ));
            from = sequence + 1;
        }
        found
    }

    struct Random(u64);

    impl Random {
        fn below(&mut self, bound: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % bound
        }
    }

    fn matches(filter: &str, subject: &str) -> bool {
        filter == ">" || stream_config::subject_matches(filter, subject)
    }

    /// The model's view of one operation (the rules nats-server documents:
    /// rollups, per-subject and count limits with discard old, purges by
    /// floor, filter and keep, deletes and expiries).
    fn model_apply(model: &mut Model, config: &StreamConfig, operation: &Operation) {
        match operation {
            Operation::Message {
                sequence,
                subject,
                headers: header_block,
                payload,
                retained,
                ..
            } => {
                if !retained {
                    // The sequence is used; nothing is kept or removed.
                    return;
                }
                let subject = String::from_utf8(subject.to_vec()).expect("utf-8");
                match headers::value(header_block, headers::ROLLUP) {
                    Some(b"all") => model.retain(|&existing, _| existing >= *sequence),
                    Some(b"sub") => model.retain(|_, (existing, _)| *existing != subject),
                    _ => {}
                }
                model.insert(*sequence, (subject.clone(), payload.to_vec()));
                model_limits(model, config, Some(&subject));
            }
            Operation::Delete { sequence, .. } => {
                model.remove(sequence);
            }
            Operation::Expire { sequences } => {
                for sequence in sequences {
                    model.remove(sequence);
                }
            }
            Operation::Purge {
                last,
                filter,
                sequence,
                keep,
            } => {
                let filter = filter.as_ref().map_or(">".to_string(), |filter| {
                    String::from_utf8_lossy(filter).into()
                });
                let bound = sequence.unwrap_or(u64::MAX).min(last + 1);
                let mut limit = bound;
                if let Some(keep) = keep {
                    let matching: Vec<u64> = model
                        .iter()
                        .filter(|(&existing, (subject, _))| {
                            existing <= *last && matches(&filter, subject)
                        })
                        .map(|(&existing, _)| existing)
                        .collect();
                    if matching.len() <= *keep as usize {
                        return;
                    }
                    if *keep > 0 {
                        limit = limit.min(matching[matching.len() - *keep as usize]);
                    }
                }
                model.retain(|&existing, (subject, _)| {
                    existing >= limit || !matches(&filter, subject)
                });
            }
            Operation::Config { .. } => model_limits(model, config, None),
            Operation::ConsumerCreate { .. }
            | Operation::ConsumerDelete { .. }
            | Operation::ConsumerState { .. } => {}
        }
    }

    /// After a message, its subject's limit and then the count (a new
    /// message evicts its own subject's oldest first); after a config,
    /// the count and then every subject (nats-server's UpdateConfig order).
    fn model_limits(model: &mut Model, config: &StreamConfig, subject: Option<&str>) {
        if subject.is_none() {
            model_count_limit(model, config);
        }
        if config.max_msgs_per_subject > 0 {
            for subject in SUBJECTS
                .iter()
                .filter(|one| subject.is_none_or(|s| s == **one))
            {
                loop {
                    let on_subject: Vec<u64> = model
                        .iter()
                        .filter(|(_, (existing, _))| existing == subject)
                        .map(|(&sequence, _)| sequence)
                        .collect();
                    if on_subject.len() as i64 <= config.max_msgs_per_subject {
                        break;
                    }
                    model.remove(&on_subject[0]);
                }
            }
        }
        model_count_limit(model, config);
    }

    fn model_count_limit(model: &mut Model, config: &StreamConfig) {
        while config.max_msgs > 0 && model.len() as i64 > config.max_msgs {
            let first = *model.keys().next().expect("not empty");
            model.remove(&first);
        }
    }

    /// A random log: messages (some rolling up), deletes, expiries, purges
    /// and config changes of the limits.
    pub(in super::super) fn random_log(seed: u64, length: usize) -> Vec<Operation> {
        let mut random = Random(seed | 1);
        let mut log = Vec::new();
        let mut last = 0;
        for _ in 0..length {
            let operation = match random.below(24) {
                0..=11 => {
                    last += 1;
                    let rollup = match random.below(12) {
                        0 => "NATS/1.0\r\nNats-Rollup: sub\r\n\r\n",
                        1 => "NATS/1.0\r\nNats-Rollup: all\r\n\r\n",
                        _ => "",
                    };
                    Operation::Message {
                        sequence: last,
                        timestamp_ns: 1_000 * last,
                        subject: Bytes::from_static(SUBJECTS[random.below(3) as usize].as_bytes()),
                        headers: Bytes::from_static(rollup.as_bytes()),
                        payload: Bytes::from(format!("payload {last}").into_bytes()),
                        // An interest stream's leader found no consumer.
                        retained: random.below(8) != 0,
                    }
                }
                12 | 13 => Operation::Delete {
                    sequence: 1 + random.below(last + 1),
                    erase: false,
                },
                14 => {
                    let mut sequences: Vec<u64> =
                        (0..3).map(|_| 1 + random.below(last + 1)).collect();
                    sequences.sort_unstable();
                    sequences.dedup();
                    Operation::Expire { sequences }
                }
                15..=17 => Operation::Purge {
                    last,
                    filter: (random.below(2) == 0)
                        .then(|| Bytes::from_static(SUBJECTS[random.below(3) as usize].as_bytes())),
                    sequence: (random.below(3) == 0).then(|| 1 + random.below(last + 1)),
                    keep: (random.below(3) == 0).then(|| random.below(4)),
                },
                20 | 21 => Operation::ConsumerCreate {
                    name: CONSUMERS[random.below(2) as usize].to_string(),
                    created_unix_ns: 7_000 + random.below(100),
                    start_sequence: random.below(last + 2),
                    json: Bytes::from(format!(r#"{{"ack_wait":{}}}"#, random.below(9))),
                },
                22 => Operation::ConsumerDelete {
                    name: CONSUMERS[random.below(2) as usize].to_string(),
                },
                23 => Operation::ConsumerState {
                    name: CONSUMERS[random.below(2) as usize].to_string(),
                    state: Bytes::from(DeliveryState::initial_encoding(1 + random.below(last + 1))),
                },
                _ => {
                    let extra = format!(
                        r#","max_msgs":{},"max_msgs_per_subject":{}"#,
                        [-1, 5, 12][random.below(3) as usize],
                        [-1, 1, 3][random.below(3) as usize]
                    );
                    Operation::Config {
                        json: Bytes::from(config(&extra).to_stored_json().into_bytes()),
                    }
                }
            };
            log.push(operation);
        }
        log
    }

    /// Apply against a model: after every operation of random logs, the
    /// store and the durable consumers hold exactly what the model says; a
    /// second replica applying the same log holds byte-identical contents
    /// and consumers; the log's messages applied again over the result
    /// change nothing (a restart replays entries the store may already
    /// hold).
    #[test]
    fn apply_matches_the_model_and_replicas_agree() {
        for seed in 0..60u64 {
            let log = random_log(0x5eed_0000 + seed, 300);
            let mut first = replica(config(""));
            let mut second = replica(config(""));
            let mut model = Model::new();
            let mut consumers = ConsumersModel::new();
            for (position, operation) in log.iter().enumerate() {
                block_on(first.apply(operation.clone(), &mut ConsumerLeader::default()))
                    .expect("applies");
                block_on(second.apply(operation.clone(), &mut ConsumerLeader::default()))
                    .expect("applies");
                model_apply(&mut model, &first.config, operation);
                model_consumers(&mut consumers, operation);
                let logged: ConsumersModel = first
                    .logged_consumers
                    .iter()
                    .map(|(name, logged)| {
                        let LoggedConsumer {
                            created_unix_ns,
                            config_json,
                            delivery_state,
                        } = logged.clone();
                        (name.clone(), (created_unix_ns, config_json, delivery_state))
                    })
                    .collect();
                assert_eq!(
                    logged, consumers,
                    "seed {seed}, after operation {position}: {operation:?}"
                );
                let stored: Model = contents(&first)
                    .into_iter()
                    .map(|(sequence, _, subject, _, payload)| (sequence, (subject, payload)))
                    .collect();
                assert_eq!(
                    stored, model,
                    "seed {seed}, after operation {position}: {operation:?}"
                );
            }
            assert_eq!(contents(&first), contents(&second), "seed {seed}");
            assert_eq!(
                first.logged_consumers, second.logged_consumers,
                "seed {seed}"
            );
            let Store::Memory(log_state) = &first.store else {
                unreachable!()
            };
            let state_before = log_state.state();
            let contents_before = contents(&first);
            for operation in &log {
                if matches!(operation, Operation::Message { .. }) {
                    block_on(first.apply(operation.clone(), &mut ConsumerLeader::default()))
                        .expect("replays");
                }
            }
            let Store::Memory(log_state) = &first.store else {
                unreachable!()
            };
            assert_eq!(log_state.state(), state_before, "seed {seed}: replay");
            assert_eq!(contents(&first), contents_before, "seed {seed}: replay");
        }
    }

    /// TTL notes follow the stored messages whatever removes them, so any
    /// replica (a new leader) sees exactly what is still due.
    #[test]
    fn expiry_notes_go_with_their_messages() {
        let mut state = replica(config(r#","allow_msg_ttl":true"#));
        state.expiry = Some(Expiry::default());
        for sequence in 1..=4 {
            let operation = Operation::Message {
                sequence,
                timestamp_ns: sequence,
                subject: Bytes::from_static(b"s.a"),
                headers: Bytes::from_static(b"NATS/1.0\r\nNats-TTL: 5\r\n\r\n"),
                payload: Bytes::from_static(b"x"),
                retained: true,
            };
            block_on(state.apply(operation, &mut ConsumerLeader::default())).expect("applies");
        }
        let due = |state: &ReplicatedState| -> Vec<u64> {
            state.expiry.as_ref().expect("ttl").due(u64::MAX).collect()
        };
        assert_eq!(due(&state), [1, 2, 3, 4]);
        block_on(state.apply(
            Operation::Delete {
                sequence: 2,
                erase: false,
            },
            &mut ConsumerLeader::default(),
        ))
        .expect("applies");
        assert_eq!(due(&state), [1, 3, 4], "a delete");
        block_on(state.apply(
            Operation::Purge {
                last: 4,
                filter: None,
                sequence: Some(3),
                keep: None,
            },
            &mut ConsumerLeader::default(),
        ))
        .expect("applies");
        assert_eq!(due(&state), [3, 4], "a purge below 3");
        block_on(state.apply(
            Operation::Expire { sequences: vec![3] },
            &mut ConsumerLeader::default(),
        ))
        .expect("applies");
        assert_eq!(due(&state), [4], "an expiry");
        block_on(state.apply(
            Operation::Purge {
                last: 4,
                filter: Some(Bytes::from_static(b"s.a")),
                sequence: None,
                keep: None,
            },
            &mut ConsumerLeader::default(),
        ))
        .expect("applies");
        assert_eq!(due(&state), Vec::<u64>::new(), "a filtered purge");
        assert_eq!(state.expiry.as_ref().expect("ttl").noted(), 0);
    }

    /// Applying reports what the task answers with.
    #[test]
    fn apply_reports_what_happened() {
        let mut state = replica(config(""));
        let message = |sequence: u64| Operation::Message {
            sequence,
            timestamp_ns: sequence,
            subject: Bytes::from_static(b"s.a"),
            headers: Bytes::new(),
            payload: Bytes::from_static(b"x"),
            retained: true,
        };
        for sequence in 1..=3 {
            assert!(matches!(
                block_on(state.apply(message(sequence), &mut ConsumerLeader::default())),
                Ok(Applied::Message { sequence: applied }) if applied == sequence
            ));
        }
        let delete = |sequence| Operation::Delete {
            sequence,
            erase: false,
        };
        assert!(matches!(
            block_on(state.apply(delete(2), &mut ConsumerLeader::default())),
            Ok(Applied::Deleted { removed: true })
        ));
        assert!(matches!(
            block_on(state.apply(delete(2), &mut ConsumerLeader::default())),
            Ok(Applied::Deleted { removed: false })
        ));
        let purge = Operation::Purge {
            last: 3,
            filter: None,
            sequence: None,
            keep: None,
        };
        assert!(matches!(
            block_on(state.apply(purge, &mut ConsumerLeader::default())),
            Ok(Applied::Purged { count: 2 })
        ));
        let same = Operation::Config {
            json: Bytes::from(state.config.to_stored_json().into_bytes()),
        };
        assert!(matches!(
            block_on(state.apply(same, &mut ConsumerLeader::default())),
            Ok(Applied::Config { changed_from: None })
        ));
        let changed = Operation::Config {
            json: Bytes::from(config(r#","max_msgs":7"#).to_stored_json().into_bytes()),
        };
        assert!(matches!(
            block_on(state.apply(changed, &mut ConsumerLeader::default())),
            Ok(Applied::Config {
                changed_from: Some(_)
            })
        ));
        assert_eq!(state.config.max_msgs, 7);
    }
}
