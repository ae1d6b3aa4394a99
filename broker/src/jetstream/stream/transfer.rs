//! Snapshot transfers of a stream replica, in bounded memory on both ends
//! (docs/stream-snapshots.md has the argument).
//!
//! The leader: when Raft compacts, the replica records only what is small
//! at that index `I` (config, last sequence `L`, durable consumers; a
//! [`SnapshotPoint`]). A transfer ([`SnapshotSource`], one per follower,
//! driven by Raft's `SnapshotRead`s) streams that header, then the live
//! messages with sequence ≤ `L` from the store as it is when each chunk is
//! read (entries go on applying meanwhile), noting through a removal watch
//! every message removed after it was read, then an end record with that
//! list and the applied index `T` it reached. Memory: one chunk and one
//! message.
//!
//! The follower ([`SnapshotInstall`]): decodes the chunks as they come into
//! a fresh store, then removes what the end record lists. What it holds is
//! the leader's store at `I` minus every message the entries `I+1..=T`
//! remove, so applying those entries converges to the leader's state at
//! `T`; until then the replica is not comparable to others
//! ([`Replica::is_converged`]).

use bytes::{Bytes, BytesMut};
use tern_raft::{Node, NodeId, Role, SnapshotRead};
use tern_storage::block_store::{NewMessage, StoreError, WatchId};

use super::config::StreamConfig;
use super::consumer_leader;
use super::replica::{InstallError, Replica, StreamCanary};
use super::snapshot::{
    self, SnapshotConsumer, SnapshotDecoder, SnapshotEnd, SnapshotHeader, SnapshotPart,
    SNAPSHOT_REMOVED_RANGES_MAX,
};
use super::state::LoggedConsumer;
use super::Store;

/// What a replica recorded when Raft compacted to `index`.
#[derive(Debug, Clone)]
pub struct SnapshotPoint {
    pub index: u64,
    pub term: u64,
    /// The encoded header (`snapshot::SnapshotHeader`).
    header: Bytes,
    last_sequence: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum TransferError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A read past the start of a transfer this replica has no reader for
    /// (it never should): the transfer starts over
    /// (`Node::restart_snapshot_transfer`), as for the next case.
    #[error("snapshot transfer to node {peer}: no reader at offset {offset}")]
    Lost { peer: NodeId, offset: u64 },
    /// More removals behind the reader than an end record carries: the
    /// transfer starts over (`Node::restart_snapshot_transfer`).
    #[error(
        "snapshot transfer to node {peer}: more than {SNAPSHOT_REMOVED_RANGES_MAX} ranges removed behind the reader"
    )]
    Overtaken { peer: NodeId },
}

/// One transfer's reader on the leader.
#[derive(Debug)]
pub struct SnapshotSource {
    peer: NodeId,
    index: u64,
    session: u64,
    /// Not sent yet (taken by the first read).
    header: Option<Bytes>,
    last_sequence: u64,
    /// The next sequence to look at.
    next_sequence: u64,
    watch: WatchId,
    /// Encoded and not handed out yet (at most a chunk and a record).
    pending: BytesMut,
    /// Bytes handed out (the next read's offset).
    produced: u64,
    /// CRC-32C of every byte encoded so far.
    checksum: u32,
    ended: bool,
}

impl Replica {
    /// Records this replica's state at its applied index as the snapshot
    /// Raft compacts to; returns its index and term. Only the header is
    /// kept: transfers read the messages from the live store.
    pub fn mark_snapshot(&mut self) -> (u64, u64) {
        let point = self.snapshot_point_here();
        self.use_snapshot_point(point)
    }

    /// What a snapshot at this replica's applied index records, for a host
    /// that compacts to it later (keeping the entries after it meanwhile):
    /// a transfer from an earlier point converges just the same, since it
    /// reads the live store and applies the entries after the point.
    pub fn snapshot_point_here(&self) -> SnapshotPoint {
        let header = self.snapshot_header();
        SnapshotPoint {
            index: header.applied_index,
            term: header.applied_term,
            last_sequence: header.last_sequence,
            header: header.encode(),
        }
    }

    /// Makes `point` (recorded by [`Replica::snapshot_point_here`]) the
    /// snapshot Raft compacts to; returns its index and term.
    pub fn use_snapshot_point(&mut self, point: SnapshotPoint) -> (u64, u64) {
        assert!(
            point.index <= self.state.applied_index,
            "a snapshot point past what applied"
        );
        let marked = (point.index, point.term);
        self.snapshot_point = Some(point);
        marked
    }

    fn snapshot_header(&self) -> SnapshotHeader {
        SnapshotHeader {
            applied_index: self.state.applied_index,
            applied_term: self.state.applied_term,
            stored_last_unix_ns: self.state.stored_last_unix_ns,
            last_sequence: with_store!(&self.state.store, log => log.last_sequence()),
            config_json: Bytes::from(self.state.config.to_stored_json()),
            consumers: self
                .state
                .logged_consumers
                .iter()
                .map(|(name, logged)| SnapshotConsumer {
                    name: name.clone(),
                    created_unix_ns: logged.created_unix_ns,
                    config_json: logged.config_json.clone(),
                    delivery_state: logged.delivery_state.clone(),
                })
                .collect(),
        }
    }

    /// The index of the snapshot this replica serves transfers from.
    pub fn snapshot_point_index(&self) -> Option<u64> {
        self.snapshot_point.as_ref().map(|point| point.index)
    }

    /// Whether this replica's contents are a replica's state at its applied
    /// index (not so between a fuzzy snapshot install and the index it
    /// converges at).
    pub fn is_converged(&self) -> bool {
        self.state.applied_index >= self.converges_at
    }

    /// Answers Raft's read of snapshot bytes for a transfer: `None` when
    /// the read is of a snapshot this replica no longer has (Raft ignores
    /// those anyway); an error when the host must restart the transfer.
    pub async fn read_snapshot(
        &mut self,
        read: &SnapshotRead,
    ) -> Result<Option<(Bytes, bool)>, TransferError> {
        let Some(point) = self
            .snapshot_point
            .as_ref()
            .filter(|point| point.index == read.index)
        else {
            return Ok(None);
        };
        let current = self.transfers.get(&read.peer).is_some_and(|source| {
            source.index == read.index
                && source.session == read.session
                && source.produced == read.offset
        });
        if !current {
            if read.offset != 0 {
                return Err(TransferError::Lost {
                    peer: read.peer,
                    offset: read.offset,
                });
            }
            let watch = with_store!(&mut self.state.store, log => log.watch_removals());
            let source = SnapshotSource::new(
                read.peer,
                point.index,
                read.session,
                point.header.clone(),
                point.last_sequence,
                watch,
            );
            if let Some(old) = self.transfers.insert(read.peer, source) {
                with_store!(&mut self.state.store, log => log.finish_watch(old.watch));
            }
        }
        let converges_at = self.converges_at;
        let drop_removals = self.canary == Some(StreamCanary::SnapshotWithoutRemovals);
        let source = self.transfers.get_mut(&read.peer).expect("inserted above");
        let chunk = source
            .read(&mut self.state, converges_at, read.max_bytes, drop_removals)
            .await;
        if chunk.is_err() {
            let source = self.transfers.remove(&read.peer).expect("reading");
            with_store!(&mut self.state.store, log => log.finish_watch(source.watch));
        }
        chunk.map(Some)
    }

    /// Drops the readers of transfers `node` no longer runs.
    pub fn retain_transfers(&mut self, node: &Node) {
        let leading = node.role() == Role::Leader;
        let gone: Vec<NodeId> = self
            .transfers
            .iter()
            .filter(|(peer, source)| {
                !leading || node.snapshot_transfer(**peer) != Some((source.index, source.session))
            })
            .map(|(peer, _)| *peer)
            .collect();
        for peer in gone {
            let source = self.transfers.remove(&peer).expect("listed");
            with_store!(&mut self.state.store, log => log.finish_watch(source.watch));
        }
    }

    /// Transfers being read (each holds a removal watch on the store).
    pub fn transfers_open(&self) -> usize {
        self.transfers.len()
    }

    /// The whole snapshot at the applied index in one buffer: what the
    /// simulator's disk keeps for a replica, and tests (a transfer reads
    /// in chunks instead).
    pub async fn snapshot_whole(&mut self) -> Result<Bytes, StoreError> {
        let header = self.snapshot_header();
        let watch = with_store!(&mut self.state.store, log => log.watch_removals());
        let mut source = SnapshotSource::new(
            0,
            header.applied_index,
            0,
            header.encode(),
            header.last_sequence,
            watch,
        );
        let mut whole = BytesMut::new();
        loop {
            let converges_at = self.converges_at;
            match source
                .read(&mut self.state, converges_at, 1 << 20, false)
                .await
            {
                Ok((chunk, last)) => {
                    whole.extend_from_slice(&chunk);
                    if last {
                        return Ok(whole.freeze());
                    }
                }
                Err(TransferError::Store(error)) => return Err(error),
                Err(TransferError::Overtaken { .. } | TransferError::Lost { .. }) => {
                    unreachable!("nothing applies while a whole snapshot is read")
                }
            }
        }
    }

    /// A replica holding what `data` (a whole snapshot) says, on a new
    /// memory store.
    pub async fn from_snapshot(
        data: &[u8],
        canary: Option<StreamCanary>,
    ) -> Result<Replica, InstallError> {
        let mut install = SnapshotInstall::new(canary);
        install.push(data).await?;
        install.finish()
    }
}

impl SnapshotSource {
    fn new(
        peer: NodeId,
        index: u64,
        session: u64,
        header: Bytes,
        last_sequence: u64,
        watch: WatchId,
    ) -> SnapshotSource {
        SnapshotSource {
            peer,
            index,
            session,
            header: Some(header),
            last_sequence,
            next_sequence: 1,
            watch,
            pending: BytesMut::new(),
            produced: 0,
            checksum: 0,
            ended: false,
        }
    }

    /// The next at most `max_bytes` of the snapshot, and whether they end
    /// it.
    async fn read(
        &mut self,
        state: &mut super::state::ReplicatedState,
        converges_at: u64,
        max_bytes: usize,
        drop_removals: bool,
    ) -> Result<(Bytes, bool), TransferError> {
        let max_bytes = max_bytes.max(1);
        if !with_store!(&state.store, log => log.watch_is_healthy(self.watch)) && !self.ended {
            return Err(TransferError::Overtaken { peer: self.peer });
        }
        while self.pending.len() < max_bytes && !self.ended {
            if let Some(header) = self.header.take() {
                self.checksum = crc32c::crc32c_append(self.checksum, &header);
                self.pending.extend_from_slice(&header);
                continue;
            }
            let next =
                with_store!(&state.store, log => log.next_matching(self.next_sequence, |_| true))
                    .filter(|sequence| *sequence <= self.last_sequence);
            match next {
                Some(sequence) => {
                    let message = with_store!(&state.store, log => log.get(sequence).await)?
                        .expect("listed live a moment ago");
                    let start = self.pending.len();
                    snapshot::encode_message(
                        &mut self.pending,
                        sequence,
                        message.timestamp_ns,
                        &message.subject,
                        &message.headers,
                        &message.payload,
                    );
                    self.checksum = crc32c::crc32c_append(self.checksum, &self.pending[start..]);
                    // From now on its removal is the follower's to know.
                    with_store!(&mut state.store, log => log.advance_watch(self.watch, sequence + 1));
                    self.next_sequence = sequence + 1;
                }
                None => {
                    let removed =
                        with_store!(&mut state.store, log => log.finish_watch(self.watch))
                            .expect("the transfer's watch");
                    if removed.overflowed {
                        return Err(TransferError::Overtaken { peer: self.peer });
                    }
                    let end = SnapshotEnd {
                        converges_at: converges_at.max(state.applied_index),
                        removed: if drop_removals {
                            Vec::new()
                        } else {
                            removed.ranges
                        },
                    };
                    snapshot::encode_end(&mut self.pending, &end, self.checksum);
                    self.ended = true;
                }
            }
        }
        let chunk = self
            .pending
            .split_to(self.pending.len().min(max_bytes))
            .freeze();
        self.produced += chunk.len() as u64;
        Ok((chunk, self.ended && self.pending.is_empty()))
    }
}

/// A snapshot a follower receives, built into a fresh store as its chunks
/// come.
pub struct SnapshotInstall {
    decoder: SnapshotDecoder,
    canary: Option<StreamCanary>,
    /// The empty store the snapshot is built into (`None`: a new memory
    /// store), taken by the header.
    store: Option<Store>,
    state_entry_bytes_max: usize,
    /// Built from the header.
    replica: Option<Replica>,
    /// The header's last sequence.
    last_sequence: u64,
    end: Option<SnapshotEnd>,
}

impl SnapshotInstall {
    pub fn new(canary: Option<StreamCanary>) -> SnapshotInstall {
        SnapshotInstall {
            decoder: SnapshotDecoder::new(),
            canary,
            store: None,
            state_entry_bytes_max: crate::jetstream::entry::CONSUMER_STATE_BYTES_MAX,
            replica: None,
            last_sequence: 0,
            end: None,
        }
    }

    /// A snapshot built into `store` (empty, opened by the host: a file
    /// stream's staged directory), for a replica whose consumers' state
    /// entries are at most `state_entry_bytes_max`.
    pub(super) fn into_store(
        store: Store,
        state_entry_bytes_max: usize,
        canary: Option<StreamCanary>,
    ) -> SnapshotInstall {
        SnapshotInstall {
            store: Some(store),
            state_entry_bytes_max,
            ..SnapshotInstall::new(canary)
        }
    }

    /// The snapshot's index, once its header arrived.
    pub fn index(&self) -> Option<u64> {
        Some(self.replica.as_ref()?.state.applied_index)
    }

    /// The next bytes, in order.
    pub async fn push(&mut self, data: &[u8]) -> Result<(), InstallError> {
        self.decoder.push(data)?;
        while let Some(part) = self.decoder.next_part()? {
            match part {
                SnapshotPart::Header(header) => {
                    let config = StreamConfig::from_stored_json(&header.config_json)
                        .map_err(InstallError::Config)?;
                    for consumer in &header.consumers {
                        consumer_leader::check_logged(
                            &consumer.name,
                            &consumer.config_json,
                            &consumer.delivery_state,
                        )?;
                    }
                    let mut replica = match self.store.take() {
                        None => Replica::in_memory(config, self.canary).await?,
                        Some(store) => {
                            let state =
                                super::state::ReplicatedState::new(store, std::rc::Rc::new(config));
                            Replica::new(state, self.state_entry_bytes_max, self.canary)
                        }
                    };
                    let state = &mut replica.state;
                    state.logged_consumers = header
                        .consumers
                        .into_iter()
                        .map(|consumer| {
                            let logged = LoggedConsumer {
                                created_unix_ns: consumer.created_unix_ns,
                                config_json: consumer.config_json,
                                delivery_state: consumer.delivery_state,
                            };
                            (consumer.name, logged)
                        })
                        .collect();
                    state.stored_last_unix_ns = header.stored_last_unix_ns;
                    state.applied_index = header.applied_index;
                    state.applied_term = header.applied_term;
                    self.last_sequence = header.last_sequence;
                    self.replica = Some(replica);
                }
                SnapshotPart::Message(message) => {
                    let replica = self.replica.as_mut().expect("the header comes first");
                    with_store!(&mut replica.state.store, log => log.append(NewMessage {
                        sequence: message.sequence,
                        timestamp_ns: message.timestamp_ns,
                        subject: &message.subject,
                        headers: &message.headers,
                        payload: &message.payload,
                    }).await)?;
                }
                SnapshotPart::End(end) => {
                    let replica = self.replica.as_mut().expect("the header comes first");
                    let state = &mut replica.state;
                    // What went on the leader after it was read.
                    for (first, last) in &end.removed {
                        let mut from = *first;
                        while let Some(sequence) =
                            with_store!(&state.store, log => log.next_matching(from, |_| true))
                                .filter(|sequence| sequence <= last)
                        {
                            with_store!(&mut state.store, log => log.delete(sequence));
                            from = sequence + 1;
                        }
                    }
                    let last_sequence = self.last_sequence;
                    let stored_last = with_store!(&state.store, log => log.last_sequence());
                    if last_sequence > stored_last {
                        // Trailing sequences were used and removed: one
                        // placeholder carries the last sequence, then goes.
                        with_store!(&mut state.store, log => log.append(NewMessage {
                            sequence: last_sequence,
                            timestamp_ns: state.stored_last_unix_ns,
                            subject: b"",
                            headers: b"",
                            payload: b"",
                        }).await)?;
                        with_store!(&mut state.store, log => log.delete(last_sequence));
                    }
                    let first = with_store!(&state.store, log => log.next_matching(0, |_| true))
                        .unwrap_or(last_sequence + 1);
                    with_store!(&mut state.store, log => log.purge_below(first).await)?;
                    state.rebuild_expiry().await?;
                    self.end = Some(end);
                }
            }
        }
        Ok(())
    }

    /// The replica, once the whole snapshot arrived.
    pub fn finish(self) -> Result<Replica, InstallError> {
        self.decoder.finish()?;
        let mut replica = self.replica.expect("a finished snapshot has a header");
        let end = self.end.expect("a finished snapshot has an end");
        replica.converges_at = end.converges_at;
        Ok(replica)
    }
}

#[cfg(test)]
#[path = "transfer_tests.rs"]
mod tests;
