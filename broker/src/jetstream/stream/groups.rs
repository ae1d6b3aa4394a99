//! The Raft groups of every stream a shard owns, driven as one by the
//! cluster's [`MultiRaft`]: file streams' groups persist through the
//! shard's one journal (one flush makes every group in it durable: group
//! commit across streams), memory streams' groups are durable at once (a
//! second `MultiRaft`, so a memory stream never waits for an fsync).
//!
//! One driver task per shard ([`StreamGroups::run`]) takes each flush,
//! appends its hard states and entries to the journal, and once the
//! journal says they are durable hands what committed to each stream's
//! task ([`StreamHandle`]'s committed queue) and wakes it. Stream tasks
//! propose through [`StreamGroups::with_node`], which wakes the driver;
//! nothing here is shared with another shard.
//!
//! The journal keeps what a group writes: hard states, and entries (a
//! rewritten suffix is a record at a lower index, which recovery reads as
//! replacing everything from there). Snapshots installed from a leader are
//! not written yet: single-node groups never receive one.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;

use rustc_hash::FxHashMap;
use tern_raft::{HardState, Node};
use tern_shard::Waiters;
use tern_storage::dma::DmaDevice;
use tern_storage::{AppendError, NewRecord};
use tern_storage::{Journal, JournalError};

use super::super::entry::{self, RECORD_HARD_STATE};
use super::StreamHandle;
use crate::cluster::multiraft::{Durable, Flush, GroupError, GroupId, MultiRaft};

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
    handles: RefCell<FxHashMap<GroupId, (Persistence, Rc<StreamHandle>)>>,
    /// Per file group, the last hard state made durable.
    durable_hard_states: RefCell<FxHashMap<GroupId, HardState>>,
    /// Why the journal stopped taking records, once it did.
    failure: RefCell<Option<JournalError>>,
    /// Something was proposed (or a group came or went) since the driver
    /// last looked.
    work: Cell<bool>,
    wake: Waiters,
}

impl StreamGroups {
    pub fn new(journal: Option<Rc<Journal<DmaDevice>>>) -> Rc<StreamGroups> {
        Rc::new(StreamGroups {
            journal,
            file: RefCell::new(MultiRaft::new()),
            memory: RefCell::new(MultiRaft::new()),
            handles: RefCell::new(FxHashMap::default()),
            durable_hard_states: RefCell::new(FxHashMap::default()),
            failure: RefCell::new(None),
            work: Cell::new(false),
            wake: Waiters::new(),
        })
    }

    /// Runs `node` for `handle`'s stream.
    pub fn insert(
        &self,
        group: GroupId,
        node: Node,
        persistence: Persistence,
        handle: Rc<StreamHandle>,
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
        let mut in_flight: VecDeque<InFlight> = VecDeque::new();
        loop {
            self.work.set(false);
            self.drive_memory();
            if self.failure.borrow().is_none() {
                if let Err(error) = self.drive_journal(&mut in_flight).await {
                    self.fail_file_groups(error);
                    in_flight.clear();
                }
            }
            // A group advanced by a finished flush may have more to hand
            // out (its commits follow its entries' flush).
            if self.work.get() || self.has_ready() {
                continue;
            }
            let new_work = async {
                self.wake.wait_until(|| self.work.get()).await;
                Ok(())
            };
            let journal = async {
                match (in_flight.front(), &self.journal) {
                    (Some(flush), Some(journal)) => journal
                        .wait_durable(flush.journal_sequence)
                        .await
                        .map(|_| ()),
                    _ => std::future::pending().await,
                }
            };
            if let Err(error) = futures_lite::future::or(new_work, journal).await {
                self.fail_file_groups(error);
                in_flight.clear();
            }
        }
    }

    fn has_ready(&self) -> bool {
        let ready = |raft: &RefCell<MultiRaft>| raft.borrow().has_ready();
        ready(&self.memory) || (self.failure.borrow().is_none() && ready(&self.file))
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

    /// File groups: the next flush into the journal, and every flush the
    /// journal made durable since finished.
    async fn drive_journal(&self, in_flight: &mut VecDeque<InFlight>) -> Result<(), JournalError> {
        let Some(journal) = &self.journal else {
            return Ok(());
        };
        let flush = self.file.borrow_mut().take_flush();
        if let Some(flush) = flush {
            let hard_states = flush
                .writes
                .iter()
                .filter_map(|write| write.hard_state.map(|state| (write.group, state)))
                .collect();
            let journal_sequence = append_flush(journal, &flush).await?;
            in_flight.push_back(InFlight {
                number: flush.number,
                journal_sequence,
                hard_states,
            });
        }
        let durable_sequence = journal.durable_sequence();
        let mut finished = None;
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
        let durable = {
            let mut raft = self.file.borrow_mut();
            match finished {
                Some(number) => raft.flushed(number),
                None => raft.finish(),
            }
        };
        self.dispatch(durable);
        Ok(())
    }

    /// Hands committed entries to their streams' tasks.
    fn dispatch(&self, durable: Durable) {
        assert!(
            durable.snapshot_steps.is_empty()
                && durable.snapshot_reads.is_empty()
                && durable.read_states.is_empty(),
            "single-node stream groups install no snapshot and ask for no read index"
        );
        let handles = self.handles.borrow();
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
        assert!(
            write.snapshot.is_none(),
            "group {}: a snapshot to persist (installed from a leader) needs a journal record",
            write.group
        );
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
