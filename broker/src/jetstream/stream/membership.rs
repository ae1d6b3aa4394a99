//! A replicated stream's voters as the task keeps them: the meta group
//! places the stream on a set of nodes (`StreamApi::Peers`), and the
//! stream's leader moves its Raft group there one voter at a time
//! (removals first, so a quorum never waits for a new, empty replica;
//! itself last, by handing leadership over); every replica records each
//! change that applies in its config file's `"peers"`, which is the
//! group's membership after a restart. A child of `stream`, beside
//! `task`.

use tern_raft::{EntryKind, Node, ProposeError};

use super::super::persist;
use super::core::MembershipStep;
use super::failure::StreamFailure;
use super::task::StreamTask;

impl StreamTask {
    /// The leader proposes the next membership change towards the voters
    /// the meta group gave the stream (one in flight at a time; Raft
    /// refuses a second until the first committed). Removing itself, it
    /// hands leadership to another desired voter instead: that leader
    /// removes it.
    /// The meta group placed the stream on `peers`.
    pub(super) fn place_on(&mut self, peers: Vec<u64>) {
        let this = self.groups.node(self.core.group, Node::id);
        let replicated = peers.len() > 1;
        self.core.place_on(peers.clone(), this);
        if self.core.placed_elsewhere {
            // The group may have removed this node before the meta group's
            // placement reached it (the stream's leader applied the
            // placement first): then nothing more comes, and the copy goes
            // now.
            let in_latest = self.groups.node(self.core.group, |node: &Node| {
                node.membership().contains(this)
            });
            if self.handle.is_replicated() && !self.core.membership.contains(this) && !in_latest {
                log::info!(target: "tern::jetstream", "stream {}: placed elsewhere ({peers:x?}); the group already removed this replica", self.handle.name);
                self.core.removed_from_group = true;
                self.core.desired_peers = None;
                return;
            }
            log::info!(target: "tern::jetstream", "stream {}: placed elsewhere ({peers:x?}); this replica stays a voter until the group removes it", self.handle.name);
        }
        if replicated && !self.handle.is_replicated() {
            self.become_replicated();
        }
        self.change_membership();
    }

    /// A one-voter stream about to gain voters: from now on it runs as a
    /// replicated stream (subscribed only while it leads, its log kept for
    /// followers), and its node's log, compacted to what applied, has a
    /// point a new replica is sent.
    fn become_replicated(&mut self) {
        let node_snapshot_index = self
            .groups
            .node(self.core.group, |node: &Node| node.log().snapshot_index());
        if let Some(snapshot) = self.core.become_replicated(node_snapshot_index) {
            self.groups.compact(self.core.group, snapshot);
        }
        self.handle.replicated.set(true);
        log::info!(target: "tern::jetstream", "stream {}: gains voters (from index {})", self.handle.name, self.core.replica.state.applied_index);
    }

    pub(super) fn change_membership(&mut self) {
        if self.core.desired_peers.is_none() || !self.is_leading() {
            return;
        }
        let core = &mut self.core;
        let step = self
            .groups
            .node(core.group, |node| core.membership_step(node));
        let change = match step {
            None | Some(MembershipStep::Wait) => return,
            Some(MembershipStep::TransferTo(target)) => {
                log::info!(target: "tern::jetstream", "stream {}: this node leaves the stream's voters; leadership goes to node {target:x} first", self.handle.name);
                self.groups
                    .with_node(self.core.group, |node| node.transfer_leadership(target));
                return;
            }
            Some(MembershipStep::Propose(change)) => change,
        };
        match self.groups.with_node(self.core.group, |node| {
            node.propose_membership(change.clone())
        }) {
            Ok(index) => {
                log::info!(target: "tern::jetstream", "stream {}: proposed {change:?} at index {index}", self.handle.name)
            }
            // The previous change has not committed yet, or leadership
            // is moving: the next turn tries again.
            Err(ProposeError::MembershipChangePending | ProposeError::Transferring) => {}
            Err(error) => {
                log::warn!(target: "tern::jetstream", "stream {}: {change:?} refused: {error:?}", self.handle.name)
            }
        }
    }

    /// A membership entry applied: the group's voters from now on, kept
    /// in the config file for a restart. Removed for good (placed
    /// elsewhere, and no later entry in the log adds it back: a replica
    /// that rejoined replays its old removal on the way), the copy goes
    /// at the end of the turn.
    pub(super) async fn membership_applied(
        &mut self,
        change: EntryKind,
    ) -> Result<(), StreamFailure> {
        let core = &mut self.core;
        self.groups
            .node(core.group, |node| core.membership_applied(&change, node));
        log::info!(target: "tern::jetstream", "stream {}: voters now {:x?}", self.handle.name, self.core.membership.voters);
        if self.files.is_some() {
            let stored = self.js.stored_config_json(
                self.core.group,
                &self.core.replica.state.config.to_stored_json(),
                &self.core.membership.voters,
            );
            self.write_config_file(&stored).await?;
        }
        Ok(())
    }
}

impl StreamTask {
    /// The group's removal of this node applied: it no longer needs this
    /// copy (the meta group placed the stream elsewhere first), which goes
    /// as a deleted stream's does.
    pub(super) async fn leave_group(&mut self) {
        log::info!(target: "tern::jetstream", "stream {}: removed from the stream's voters; deleting this copy", self.handle.name);
        if let Err(error) = self.remove_copy("this replica left the stream").await {
            log::warn!(target: "tern::jetstream", "stream {}: deleting the copy this node left: {error}", self.handle.name);
        }
    }

    /// Damage found in this replica's files while it ran: it stopped
    /// (what it owed failed), and now starts again empty from its peers
    /// ([`JetStream::rebuild_from_peers`]), keeping its durable term and
    /// vote, and not voting until it has every entry it acknowledged.
    pub(super) async fn rebuild_from_peers(self) {
        let (hard_state, acknowledged_index) = self.groups.node(self.core.group, |node: &Node| {
            (node.hard_state(), node.log().last_index())
        });
        self.groups.remove(self.core.group);
        let js = self.js.clone();
        js.forget_stream(&self.handle);
        let reason = self.failure.clone().unwrap_or_default();
        let rebuild = super::super::Rebuild {
            config: (*self.core.replica.state.config).clone(),
            created_unix_ns: self.core.created_unix_ns,
            group: self.core.group,
            peers: self.core.membership.voters.clone(),
            previous: super::super::persist::RaftState::created(1),
            hard_state: Some(hard_state),
            acknowledged_index,
            entries_lost: false,
        };
        let name = self.handle.name.clone();
        // Its files close before the directory moves aside.
        drop(self);
        if let Err(error) = js.rebuild_from_peers(rebuild, &reason).await {
            log::error!(target: "tern::jetstream", "stream {name}: {reason}; rebuilding from its peers: {error}; the stream stays offline on this node (nothing was deleted)");
            js.damaged.borrow_mut().insert(
                name,
                format!("{reason}; rebuilding from its peers: {error}"),
            );
        }
    }

    /// Stops the stream here and removes its files (a delete, or this
    /// replica leaving): owed replies fail with `reason`.
    pub(super) async fn remove_copy(
        &mut self,
        reason: &str,
    ) -> Result<(), persist::StreamFilesError> {
        self.handle.stopped.set(true);
        // Owed replies of entries not yet applied get an error.
        self.fail_pending(reason);
        self.js.journal().checkpoint(self.core.group, u64::MAX);
        let result = self.js.remove_stream_files(&self.handle.name).await;
        self.js.forget_stream(&self.handle);
        result
    }
}
