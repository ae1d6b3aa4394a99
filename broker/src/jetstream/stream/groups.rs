//! The Raft groups of every stream a shard owns, driven as one by the
//! cluster's [`MultiRaft`]: file streams' groups persist through the
//! shard's one journal (one flush makes every group in it durable: group
//! commit across streams), memory streams' groups are durable at once (a
//! second `MultiRaft`, so a memory stream never waits for an fsync).
//!
//! One driver task per shard ([`StreamGroups::run`]) takes each flush and
//! queues it for the shard's appender task, which appends its hard states
//! and entries to the journal (waiting for room when the journal has
//! none: the driver meanwhile goes on ticking, driving memory groups and
//! sending, and takes no more than [`QUEUED_FLUSHES_MAX`] flushes ahead);
//! once the journal says a flush is durable the driver hands what
//! committed to each stream's task ([`StreamHandle`]'s committed queue)
//! and wakes it. Stream tasks propose through
//! [`StreamGroups::with_node`], which wakes the driver; nothing here is
//! shared with another shard.
//!
//! In a cluster the driver also ticks every group (each
//! [`RAFT_TICK`]) and hands each batch of messages for another node to
//! the shard's routes ([`StreamGroups::set_transport`]); what arrives from
//! peers enters through [`StreamGroups::step`].
//!
//! The journal keeps what a group writes: hard states, and entries (a
//! rewritten suffix is a record at a lower index, which recovery reads as
//! replacing everything from there). A snapshot installed from a leader
//! is a record that voids the group's earlier entries; its contents are
//! the host's to write (a stream's staged store, the meta checkpoint).

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;

use rustc_hash::FxHashMap;
use std::time::{Duration, Instant};

use tern_raft::{Envelope, HardState, Node};
use tern_shard::Waiters;
use tern_storage::block_store::DmaFiles;
use tern_storage::dma::DmaDevice;
use tern_storage::{AppendError, NewRecord};
use tern_storage::{Journal, JournalError};

use super::super::entry::{self, RECORD_HARD_STATE, RECORD_SNAPSHOT};
use super::super::votes::Votes;
use super::StreamHandle;
use crate::cluster::multiraft::{Durable, Flush, GroupError, GroupId, MultiRaft, Outgoing};

/// What runs on a group's committed entries: a stream's task, or the
/// meta group's host.
pub trait GroupHost {
    /// Entries that committed, in order, to apply.
    fn committed(&self, entries: Vec<tern_raft::Entry>);
    /// A follower's snapshot work, before the group's next entries.
    fn snapshot_step(&self, step: crate::cluster::multiraft::SnapshotStep) {
        panic!("a group without snapshots was sent one: {step:?}");
    }
    /// The leader needs bytes of its snapshot for a follower.
    fn snapshot_read(&self, read: tern_raft::SnapshotRead) {
        panic!("a group without snapshots was asked for one: {read:?}");
    }
    /// Whether the host writes installed snapshots itself (the journal
    /// keeps no record of them).
    fn persists_snapshots(&self) -> bool {
        false
    }
    /// The group's role or leader changed on this node (a message from
    /// another node moved it): the host follows at once, not at its next
    /// turn.
    fn leadership_moved(&self) {}
}

impl GroupHost for StreamHandle {
    fn committed(&self, entries: Vec<tern_raft::Entry>) {
        StreamHandle::committed(self, entries)
    }

    fn snapshot_step(&self, step: crate::cluster::multiraft::SnapshotStep) {
        StreamHandle::snapshot_step(self, step)
    }

    fn snapshot_read(&self, read: tern_raft::SnapshotRead) {
        StreamHandle::snapshot_read(self, read)
    }

    fn leadership_moved(&self) {
        StreamHandle::leadership_moved(self)
    }

    /// The task builds an installed snapshot into a staged store and
    /// checkpoints it (docs/stream-snapshots.md).
    fn persists_snapshots(&self) -> bool {
        true
    }
}

/// A group's persistence and host.
type Hosted = (Persistence, Rc<dyn GroupHost>);

/// One Raft tick in a cluster: elections time out after 10 to 20 ticks,
/// leaders send heartbeats every 2 (`tern_raft::Config::new`).
pub const RAFT_TICK: Duration = Duration::from_millis(50);

/// Carries a batch of Raft messages to another node (the shard's routes).
pub type Transport = Box<dyn Fn(Outgoing)>;

/// Flushes taken and not yet in the journal, at most: beyond, groups
/// wait (their proposals stay in their logs) until the appender catches up.
pub const QUEUED_FLUSHES_MAX: usize = 16;

/// A flush taken, waiting for the appender.
struct Queued {
    flush: Flush,
    hard_states: Vec<(GroupId, HardState)>,
}

/// A flush whose records are in the journal, waiting to be durable.
struct InFlight {
    number: u64,
    /// The journal sequence of its last record.
    journal_sequence: u64,
    hard_states: Vec<(GroupId, HardState)>,
}

/// Where a group's entries persist.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Persistence {
    /// In the shard's journal (file streams).
    Journal,
    /// Nowhere: durable at once (memory streams).
    Memory,
}

pub struct StreamGroups {
    journal: Option<Rc<Journal<DmaDevice>>>,
    file: RefCell<MultiRaft>,
    memory: RefCell<MultiRaft>,
    /// Each group's stream, to hand committed entries to.
    handles: RefCell<FxHashMap<GroupId, Hosted>>,
    /// Per file group, the last hard state made durable.
    durable_hard_states: RefCell<FxHashMap<GroupId, HardState>>,
    /// In a cluster, the votes file (`super::super::votes`): every file
    /// group's hard state, replaced before the journal write of a flush
    /// that changes one.
    votes_files: Option<DmaFiles>,
    votes: RefCell<Votes>,
    /// Why the journal stopped taking records, once it did.
    failure: RefCell<Option<JournalError>>,
    /// Flushes for the appender, in order.
    queued: RefCell<VecDeque<Queued>>,
    /// Flushes in the journal, in order, not yet seen durable.
    in_flight: RefCell<VecDeque<InFlight>>,
    /// The appender's failure, for the driver to act on.
    append_failure: RefCell<Option<JournalError>>,
    /// Wakes the appender (a flush queued).
    appender_wake: Waiters,
    /// The appender is writing a flush it took from `queued`.
    appending: Cell<bool>,
    /// Something was proposed (or a group came or went) since the driver
    /// last looked.
    work: Cell<bool>,
    wake: Waiters,
    /// Where messages for other nodes go; `None` on a single node.
    transport: RefCell<Option<Transport>>,
    /// Messages that arrived for a group this shard does not run.
    pub unknown_group_messages: Cell<u64>,
}

impl StreamGroups {
    /// `votes`: in a cluster, the votes file's directory and what it holds.
    pub fn new(
        journal: Option<Rc<Journal<DmaDevice>>>,
        votes: Option<(DmaFiles, Votes)>,
    ) -> Rc<StreamGroups> {
        let (votes_files, votes) = match votes {
            Some((files, votes)) => (Some(files), votes),
            None => (None, Votes::new()),
        };
        Rc::new(StreamGroups {
            journal,
            votes_files,
            votes: RefCell::new(votes),
            file: RefCell::new(MultiRaft::new()),
            memory: RefCell::new(MultiRaft::new()),
            handles: RefCell::new(FxHashMap::default()),
            durable_hard_states: RefCell::new(FxHashMap::default()),
            failure: RefCell::new(None),
            queued: RefCell::new(VecDeque::new()),
            in_flight: RefCell::new(VecDeque::new()),
            append_failure: RefCell::new(None),
            appender_wake: Waiters::new(),
            appending: Cell::new(false),
            work: Cell::new(false),
            wake: Waiters::new(),
            transport: RefCell::new(None),
            unknown_group_messages: Cell::new(0),
        })
    }

    /// In a cluster: the groups tick, and their messages for other nodes
    /// leave through `transport`.
    pub fn set_transport(&self, transport: Transport) {
        *self.transport.borrow_mut() = Some(transport);
        self.notify();
    }

    fn clustered(&self) -> bool {
        self.transport.borrow().is_some()
    }

    /// A message from another node for `group`.
    pub fn step(&self, group: GroupId, envelope: Envelope) {
        let hosted = self.handles.borrow().get(&group).cloned();
        match hosted {
            Some((persistence, host)) => {
                let moved = {
                    let mut raft = self.raft(persistence).borrow_mut();
                    let office = |raft: &MultiRaft| {
                        raft.node(group)
                            .map(|node| (node.role() == tern_raft::Role::Leader, node.leader()))
                    };
                    let before = office(&raft);
                    raft.step(group, envelope);
                    before != office(&raft)
                };
                if moved {
                    host.leadership_moved();
                }
                self.notify();
            }
            None => self
                .unknown_group_messages
                .set(self.unknown_group_messages.get() + 1),
        }
    }

    /// Sends what the groups queued for other nodes.
    fn send_outgoing(&self) {
        let transport = self.transport.borrow();
        for raft in [&self.file, &self.memory] {
            let batches: Vec<Outgoing> = raft.borrow_mut().take_outgoing().collect();
            if let Some(transport) = transport.as_ref() {
                for batch in batches {
                    transport(batch);
                }
            }
        }
    }

    fn tick(&self) {
        self.file.borrow_mut().tick();
        self.memory.borrow_mut().tick();
    }

    /// Runs `node` for `handle`'s stream.
    pub fn insert(
        &self,
        group: GroupId,
        node: Node,
        persistence: Persistence,
        handle: Rc<dyn GroupHost>,
    ) -> Result<(), GroupError> {
        assert!(
            persistence == Persistence::Memory || self.journal.is_some(),
            "file streams run only with a journal"
        );
        self.raft(persistence).borrow_mut().insert(group, node)?;
        self.handles
            .borrow_mut()
            .insert(group, (persistence, handle));
        self.notify();
        Ok(())
    }

    /// Stops running `group` (its stream stopped or was deleted).
    pub fn remove(&self, group: GroupId) {
        if let Some((persistence, _)) = self.handles.borrow_mut().remove(&group) {
            self.raft(persistence).borrow_mut().remove(group);
        }
        self.durable_hard_states.borrow_mut().remove(&group);
    }

    fn raft(&self, persistence: Persistence) -> &RefCell<MultiRaft> {
        match persistence {
            Persistence::Journal => &self.file,
            Persistence::Memory => &self.memory,
        }
    }

    fn persistence(&self, group: GroupId) -> Persistence {
        self.handles
            .borrow()
            .get(&group)
            .map(|(persistence, _)| *persistence)
            .expect("the group runs here")
    }

    /// Runs `work` on `group`'s node (a proposal, a campaign, a
    /// compaction), then lets the driver see what it produced.
    pub fn with_node<T>(&self, group: GroupId, work: impl FnOnce(&mut Node) -> T) -> T {
        let persistence = self.persistence(group);
        let result = {
            let mut raft = self.raft(persistence).borrow_mut();
            work(raft.node_mut(group).expect("the group runs here"))
        };
        self.notify();
        result
    }

    /// Compacts `group`'s in-memory log up to `snapshot` (nothing for the
    /// driver to do).
    pub fn compact(&self, group: GroupId, snapshot: tern_raft::Snapshot) {
        let persistence = self.persistence(group);
        let mut raft = self.raft(persistence).borrow_mut();
        raft.node_mut(group)
            .expect("the group runs here")
            .compact(snapshot);
    }

    /// Reads `group`'s node.
    pub fn node<T>(&self, group: GroupId, read: impl FnOnce(&Node) -> T) -> T {
        let persistence = self.persistence(group);
        let raft = self.raft(persistence).borrow();
        read(raft.node(group).expect("the group runs here"))
    }

    /// Reads `group`'s node if it runs here (monitoring: a stream may
    /// have stopped).
    pub fn node_if_running<T>(&self, group: GroupId, read: impl FnOnce(&Node) -> T) -> Option<T> {
        let persistence = self
            .handles
            .borrow()
            .get(&group)
            .map(|(persistence, _)| *persistence)?;
        let raft = self.raft(persistence).borrow();
        raft.node(group).map(read)
    }

    /// Monitoring: visits every group's node.
    pub fn visit_nodes(&self, mut visit: impl FnMut(GroupId, &Node)) {
        for raft in [&self.file, &self.memory] {
            for (group, node) in raft.borrow().groups() {
                visit(group, node);
            }
        }
    }

    /// Monitoring: elections and leader changes of every group this shard
    /// ran (removed ones included).
    pub fn counters(&self) -> tern_raft::NodeCounters {
        let mut counters = self.file.borrow().counters();
        counters += self.memory.borrow().counters();
        counters
    }

    /// The last hard state of `group` made durable in the journal.
    pub fn durable_hard_state(&self, group: GroupId) -> Option<HardState> {
        self.durable_hard_states.borrow().get(&group).copied()
    }

    /// Why the journal stopped, once it did (every file group then stops).
    pub fn failure(&self) -> Option<JournalError> {
        self.failure.borrow().clone()
    }

    fn notify(&self) {
        if !self.work.replace(true) {
            self.wake.wake_all();
        }
    }

    /// The driver: runs as long as the shard.
    pub async fn run(self: Rc<Self>) {
        if self.journal.is_some() {
            glommio::spawn_local(self.clone().append()).detach();
        }
        let mut next_tick = Instant::now() + RAFT_TICK;
        loop {
            self.work.set(false);
            if self.clustered() && Instant::now() >= next_tick {
                self.tick();
                next_tick = Instant::now() + RAFT_TICK;
            }
            self.drive_memory();
            let append_failure = self.append_failure.borrow_mut().take();
            if let Some(error) = append_failure {
                self.fail_file_groups(error);
            }
            if self.failure.borrow().is_none() {
                self.drive_journal();
            }
            self.send_outgoing();
            // A group advanced by a finished flush may have more to hand
            // out (its commits follow its entries' flush).
            if self.work.get() || self.has_ready() {
                continue;
            }
            let clustered = self.clustered();
            let new_work = async {
                let tick = async {
                    if clustered {
                        glommio::timer::sleep(next_tick.saturating_duration_since(Instant::now()))
                            .await;
                    } else {
                        std::future::pending::<()>().await;
                    }
                };
                futures_lite::future::or(self.wake.wait_until(|| self.work.get()), tick).await;
                Ok(())
            };
            let front = self
                .in_flight
                .borrow()
                .front()
                .map(|flush| flush.journal_sequence);
            let journal = async {
                match (front, &self.journal) {
                    (Some(sequence), Some(journal)) => {
                        journal.wait_durable(sequence).await.map(|_| ())
                    }
                    _ => std::future::pending().await,
                }
            };
            if let Err(error) = futures_lite::future::or(new_work, journal).await {
                self.fail_file_groups(error);
            }
        }
    }

    /// The appender: appends each queued flush's records in order (one
    /// task, so a journal without room delays only the file groups'
    /// writes, never the driver's ticks and sends).
    async fn append(self: Rc<Self>) {
        let journal = self.journal.clone().expect("spawned with a journal");
        loop {
            self.appender_wake
                .wait_until(|| !self.queued.borrow().is_empty())
                .await;
            let Some(Queued { flush, hard_states }) = self.queued.borrow_mut().pop_front() else {
                continue;
            };
            if self.failure.borrow().is_some() {
                continue;
            }
            self.appending.set(true);
            if let Err(error) = self.write_votes(&hard_states).await {
                self.appending.set(false);
                *self.append_failure.borrow_mut() = Some(error);
                self.queued.borrow_mut().clear();
                self.notify();
                continue;
            }
            let appended = append_flush(&journal, &flush).await;
            self.appending.set(false);
            match appended {
                Ok(journal_sequence) => self.in_flight.borrow_mut().push_back(InFlight {
                    number: flush.number,
                    journal_sequence,
                    hard_states,
                }),
                Err(error) => {
                    *self.append_failure.borrow_mut() = Some(error);
                    self.queued.borrow_mut().clear();
                }
            }
            self.notify();
        }
    }

    /// The votes file with `changed` applied, durable before the flush
    /// that carries them is written (nothing to do without a change or
    /// outside a cluster).
    async fn write_votes(&self, changed: &[(GroupId, HardState)]) -> Result<(), JournalError> {
        let Some(files) = &self.votes_files else {
            return Ok(());
        };
        if changed.is_empty() {
            return Ok(());
        }
        let bytes = {
            let mut votes = self.votes.borrow_mut();
            let file = self.file.borrow();
            for &(group, hard_state) in changed {
                let lost_through_term = file
                    .node(group)
                    .map_or(0, |node| node.entries_lost_through_term());
                votes.insert(
                    group,
                    super::super::votes::GroupVotes {
                        hard_state,
                        lost_through_term,
                    },
                );
            }
            if votes.len() > super::super::votes::GROUPS_MAX {
                // Deleted streams' groups, kept until now: only running
                // groups need their votes.
                let handles = self.handles.borrow();
                votes.retain(|group, _| handles.contains_key(group));
            }
            super::super::votes::encode(&votes)
        };
        super::super::persist::replace(files, super::super::votes::VOTES_FILE, &bytes)
            .await
            .map_err(JournalError::Poisoned)
    }

    /// Flushes taken and not yet in the journal.
    fn flushes_waiting(&self) -> usize {
        self.queued.borrow().len() + usize::from(self.appending.get())
    }

    fn has_ready(&self) -> bool {
        let ready = |raft: &RefCell<MultiRaft>| raft.borrow().has_ready();
        ready(&self.memory)
            || (self.failure.borrow().is_none()
                && self.flushes_waiting() < QUEUED_FLUSHES_MAX
                && ready(&self.file))
    }

    /// Memory groups: every flush is durable as soon as it is taken.
    fn drive_memory(&self) {
        loop {
            let durable = {
                let mut raft = self.memory.borrow_mut();
                match raft.take_flush() {
                    Some(flush) => raft.flushed(flush.number),
                    None => raft.finish(),
                }
            };
            let empty = durable.committed.is_empty();
            self.dispatch(durable);
            let more = self.memory.borrow().has_ready();
            if empty && !more {
                return;
            }
        }
    }

    /// File groups: the next flush to the appender (unless
    /// [`QUEUED_FLUSHES_MAX`] wait already), and every flush the journal
    /// made durable since finished.
    fn drive_journal(&self) {
        let Some(journal) = &self.journal else {
            return;
        };
        let flush = if self.flushes_waiting() < QUEUED_FLUSHES_MAX {
            self.file.borrow_mut().take_flush()
        } else {
            None
        };
        // Messages leave before the flush is written (Raft's contract: a
        // leader's appends need not wait for its own write; what must
        // wait, votes and acknowledgements, is held until the flush is
        // durable): followers write in parallel with this node.
        self.send_outgoing();
        if let Some(flush) = flush {
            let hard_states = flush
                .writes
                .iter()
                .filter_map(|write| write.hard_state.map(|state| (write.group, state)))
                .collect();
            {
                let handles = self.handles.borrow();
                for write in flush.writes.iter().filter(|write| write.snapshot.is_some()) {
                    assert!(
                        handles
                            .get(&write.group)
                            .is_some_and(|(_, host)| host.persists_snapshots()),
                        "group {}: a snapshot to persist, and no host that writes it",
                        write.group
                    );
                }
            }
            self.queued
                .borrow_mut()
                .push_back(Queued { flush, hard_states });
            self.appender_wake.wake_all();
        }
        let durable_sequence = journal.durable_sequence();
        let mut finished = None;
        {
            let mut in_flight = self.in_flight.borrow_mut();
            while in_flight
                .front()
                .is_some_and(|flush| flush.journal_sequence <= durable_sequence)
            {
                let flush = in_flight.pop_front().expect("front exists");
                let mut durable_hard_states = self.durable_hard_states.borrow_mut();
                for (group, state) in flush.hard_states {
                    durable_hard_states.insert(group, state);
                }
                finished = Some(flush.number);
            }
        }
        let durable = {
            let mut raft = self.file.borrow_mut();
            match finished {
                Some(number) => raft.flushed(number),
                None => raft.finish(),
            }
        };
        self.dispatch(durable);
    }

    /// Hands snapshot work and committed entries to their groups' hosts.
    fn dispatch(&self, durable: Durable) {
        assert!(
            durable.read_states.is_empty(),
            "no group asks for a read index"
        );
        let handles = self.handles.borrow();
        for (group, step) in durable.snapshot_steps {
            if let Some((_, handle)) = handles.get(&group) {
                handle.snapshot_step(step);
            }
        }
        for (group, read) in durable.snapshot_reads {
            if let Some((_, handle)) = handles.get(&group) {
                handle.snapshot_read(read);
            }
        }
        for (group, entries) in durable.committed {
            if let Some((_, handle)) = handles.get(&group) {
                handle.committed(entries);
            }
        }
    }

    /// The journal stopped: every file stream stops with its error.
    fn fail_file_groups(&self, error: JournalError) {
        log::error!(target: "tern::jetstream", "the journal stopped: {error}");
        *self.failure.borrow_mut() = Some(error);
        self.queued.borrow_mut().clear();
        self.in_flight.borrow_mut().clear();
        for (persistence, handle) in self.handles.borrow().values() {
            if *persistence == Persistence::Journal {
                handle.committed(Vec::new());
            }
        }
    }
}

/// Appends one flush's records; returns the journal sequence of the last.
async fn append_flush(journal: &Journal<DmaDevice>, flush: &Flush) -> Result<u64, JournalError> {
    let mut last = journal.durable_sequence();
    for write in &flush.writes {
        // A snapshot installed from a leader is written by its host (the
        // meta group's checkpoint, a stream's staged store) once handed
        // over; the journal records only that it happened, which voids the
        // group's earlier entry records (docs/jetstream-format.md).
        if let Some(snapshot) = &write.snapshot {
            last = append_record(
                journal,
                RECORD_SNAPSHOT,
                write.group,
                snapshot.term,
                snapshot.index,
                &[],
            )
            .await?;
        }
        if let Some(from) = write.truncate_from {
            // Recovery reads a record at a lower index as replacing the
            // suffix from there: a truncation needs the entry that follows.
            assert_eq!(
                write.entries.first().map(|entry| entry.index),
                Some(from),
                "group {}: a truncation without the entries that replace it",
                write.group
            );
        }
        if let Some(hard_state) = write.hard_state {
            let body = entry::encode_hard_state(&hard_state);
            last = append_record(
                journal,
                RECORD_HARD_STATE,
                write.group,
                hard_state.term,
                0,
                &body,
            )
            .await?;
        }
        for entry in &write.entries {
            let (kind, body) = entry::entry_record(entry);
            last =
                append_record(journal, kind, write.group, entry.term, entry.index, &body).await?;
        }
    }
    Ok(last)
}

async fn append_record(
    journal: &Journal<DmaDevice>,
    kind: u8,
    group: GroupId,
    term: u64,
    index: u64,
    body: &[u8],
) -> Result<u64, JournalError> {
    loop {
        match journal.try_append(NewRecord {
            kind,
            group,
            term,
            index,
            body,
        }) {
            Ok(sequence) => return Ok(sequence),
            Err(AppendError::Busy) => journal.wait_for_room().await,
            Err(AppendError::Failed(error)) => return Err(error),
        }
    }
}
