//! The stream task as the host of its group's snapshots
//! (docs/stream-snapshots.md): the points the leader compacts its log to,
//! the reads a leader answers for a follower behind that point, and a
//! follower's install, built into a staged store and switched in by one
//! checkpoint. A child of `stream`, beside `task`, working on the task's
//! own state.
//!
//! A file stream's install, step by step (each crash point recovers):
//! 1. the first chunk opens an empty block store in `messages.<I>/` (a
//!    leftover of an earlier attempt is removed first); chunks append to
//!    it unsynced while the live store goes on serving;
//! 2. the install (after the journal made its record durable, which voids
//!    the group's older entries) syncs the staged store, writes the
//!    snapshot's durable consumers, then the `raft` file naming
//!    generation `I`: that rename switches the stream (before it, a
//!    restart opens the old generation, drops the entries after the
//!    journal's snapshot record and waits, without voting, for the leader
//!    to send them again; the staged directory is removed at open);
//! 3. then the journal may recycle the group's records up to `I`, and the
//!    old store's directory is removed (a restart would remove it too).

use tern_raft::{Node, Snapshot, SnapshotChunk, SnapshotRead};
use tern_storage::block_store::{Manifest, MemoryFiles, StreamLog};

use super::super::api::error::ApiError;
use super::super::persist;
use super::config::StorageType;
use super::core::Staging;
use super::failure::StreamFailure;
use super::transfer::{SnapshotInstall, TransferError};
use super::*;
use crate::cluster::multiraft::SnapshotStep;

impl task::StreamTask {
    /// Snapshot work the groups driver handed over: a follower's chunks and
    /// installs (before the entries that follow them), then a leader's
    /// reads.
    pub(super) async fn snapshot_work(&mut self) -> Result<(), StreamFailure> {
        loop {
            let step = self.handle.snapshot_steps.borrow_mut().pop_front();
            match step {
                None => break,
                Some(SnapshotStep::Chunk(chunk)) => self.stage_chunk(chunk).await?,
                Some(SnapshotStep::Install(snapshot)) => self.install_snapshot(snapshot).await?,
            }
        }
        let reads: Vec<SnapshotRead> = self.handle.snapshot_reads.borrow_mut().drain(..).collect();
        for read in reads {
            self.answer_snapshot_read(read).await?;
        }
        if self.core.replica.transfers_open() > 0 {
            let replica = &mut self.core.replica;
            self.groups
                .node(self.core.group, |node| replica.retain_transfers(node));
        }
        Ok(())
    }

    async fn answer_snapshot_read(&mut self, read: SnapshotRead) -> Result<(), StreamFailure> {
        match self.core.replica.read_snapshot(&read).await {
            Ok(Some((data, last))) => {
                if read.offset == 0 {
                    log::info!(target: "tern::jetstream", "stream {}: sending node {:x} the snapshot at index {} (it is behind this leader's log)", self.handle.name, read.peer, read.index);
                }
                self.groups.with_node(self.core.group, |node| {
                    node.snapshot_chunk(&read, data, last)
                });
            }
            // A read of a snapshot since replaced: Raft asks again.
            Ok(None) => {}
            Err(TransferError::Store(error)) => return Err(error.into()),
            Err(error @ (TransferError::Overtaken { .. } | TransferError::Lost { .. })) => {
                log::info!(target: "tern::jetstream", "stream {}: {error}; the transfer starts over", self.handle.name);
                self.groups.with_node(self.core.group, |node| {
                    node.restart_snapshot_transfer(read.peer)
                });
            }
        }
        Ok(())
    }

    /// A chunk of the snapshot this follower receives, in order; the first
    /// of a transfer starts a new staged store.
    async fn stage_chunk(&mut self, chunk: SnapshotChunk) -> Result<(), StreamFailure> {
        if let Staging::Open { index } = self.core.stage(&chunk)? {
            log::info!(target: "tern::jetstream", "stream {}: receiving the leader's snapshot at index {index}", self.handle.name);
            let install = self.new_install(index).await?;
            self.core.begin_staging(&chunk, install);
        }
        self.core.push_chunk(&chunk).await
    }

    /// An empty store for a snapshot at `index`: a file stream's in
    /// `messages.<index>/` (emptied first), a memory stream's in memory.
    async fn new_install(&mut self, index: u64) -> Result<SnapshotInstall, StreamFailure> {
        let store = match self.core.replica.state.config.storage {
            StorageType::Memory => {
                let (log, _) = StreamLog::open(
                    MemoryFiles::new(),
                    task::memory_store_config(&self.js),
                    &Manifest::new(1),
                )
                .await?;
                Store::Memory(log)
            }
            StorageType::File => {
                assert_ne!(
                    index, self.core.generation,
                    "a snapshot staged over the live store"
                );
                let directory = self
                    .js
                    .stream_directory(&self.handle.name)
                    .join(persist::messages_directory(index));
                if directory.exists() {
                    std::fs::remove_dir_all(&directory).map_err(|error| {
                        StreamFailure::SnapshotInstall {
                            index,
                            reason: format!(
                                "removing {} (an earlier attempt): {error}",
                                directory.display()
                            ),
                        }
                    })?;
                }
                let files = task::open_messages_directory(&directory).await?;
                let (log, _) =
                    StreamLog::open(files, task::file_store_config(&self.js), &Manifest::new(1))
                        .await?;
                Store::File(log)
            }
        };
        Ok(SnapshotInstall::into_store(
            store,
            self.core.state_entry_bytes_max,
            None,
        ))
    }

    /// The snapshot received is this replica from now on: checkpointed (a
    /// file stream's switch), then it is the point this node serves
    /// snapshots from.
    async fn install_snapshot(&mut self, snapshot: Snapshot) -> Result<(), StreamFailure> {
        let (install, superseded) = self.core.install(&snapshot)?;
        let not_leader = ApiError::cluster_not_leader();
        for owed in superseded {
            self.fail_owed(owed, &not_leader);
        }
        if self.files.is_some() {
            // The switch: the staged store synced, its consumers, then the
            // `raft` file naming its generation.
            self.checkpoint_consumers().await?;
            let manifest =
                with_store!(&mut self.core.replica.state.store, log => log.sync().await)?;
            let state = self.checkpoint_state(install.checkpoint, manifest);
            crash_point_for_tests("snapshot-staged");
            let files = self.files.as_ref().expect("a file stream");
            persist::write_raft(files, &state).await?;
            crash_point_for_tests("snapshot-switched");
            self.js
                .journal()
                .checkpoint(self.core.group, snapshot.index);
            self.remove_messages_directory(install.old_generation);
            with_store!(&mut self.core.replica.state.store, log => log.checkpointed().await)?;
        }
        self.core.installed(install, task::monotonic_ns());
        self.refresh_snapshot();
        let state = with_store!(&self.core.replica.state.store, log => log.state());
        log::info!(target: "tern::jetstream", "stream {}: installed the leader's snapshot at index {} ({} messages, sequences {}..={})", self.handle.name, snapshot.index, state.messages, state.first_sequence, state.last_sequence);
        Ok(())
    }

    /// Removes a block-store directory this stream no longer uses (a
    /// failure is logged: the next open removes it).
    pub(super) fn remove_messages_directory(&self, generation: u64) {
        let directory = self
            .js
            .stream_directory(&self.handle.name)
            .join(persist::messages_directory(generation));
        if let Err(error) = std::fs::remove_dir_all(&directory) {
            if error.kind() != std::io::ErrorKind::NotFound {
                log::warn!(target: "tern::jetstream", "stream {}: removing {}: {error}", self.handle.name, directory.display());
            }
        }
    }

    /// Whether Raft's snapshot (what it compacted to or restored from) has
    /// a point this replica can send.
    pub(super) fn has_point_for_raft_snapshot(&self) -> bool {
        let index = self
            .groups
            .node(self.core.group, |node: &Node| node.log().snapshot_index());
        index == 0 || self.core.replica.snapshot_point_index() == Some(index)
    }
}

/// Test hook: with `TERN_TEST_CRASH_AT=<point>`, the server SIGKILLs
/// itself at that point of a file stream's install (`snapshot-staged`:
/// the staged store and its consumers written, the `raft` file not;
/// `snapshot-switched`: the `raft` file written, the journal and the old
/// directory not yet told), for the crash-safety test. Unset in
/// production: nothing happens.
fn crash_point_for_tests(point: &str) {
    if std::env::var("TERN_TEST_CRASH_AT").is_ok_and(|wanted| wanted == point) {
        log::warn!(target: "tern::jetstream", "TERN_TEST_CRASH_AT={point}: killing this process");
        // SAFETY: kill(2) of this process with a valid signal.
        unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
    }
}
