//! A replicated stream's voters as the task keeps them: the meta group
//! places the stream on a set of nodes (`StreamApi::Peers`), and the
//! stream's leader moves its Raft group there one voter at a time
//! (removals first, so a quorum never waits for a new, empty replica;
//! itself last, by handing leadership over); every replica records each
//! change that applies in its config file's `"peers"`, which is the
//! group's membership after a restart. A child of `stream`, beside
//! `task`.

use tern_raft::{EntryKind, Membership, Node, ProposeError};

use super::super::persist;
use super::failure::StreamFailure;
use super::task::StreamTask;

/// The next change that moves `voters` towards `desired`: a voter to
/// remove (not `this`), else one to add, else `this` to remove (`None`:
/// nothing to do).
pub(super) fn next_change(voters: &[u64], desired: &[u64], this: u64) -> Option<EntryKind> {
    if let Some(&gone) = voters
        .iter()
        .find(|voter| !desired.contains(voter) && **voter != this)
    {
        return Some(EntryKind::RemoveVoter(gone));
    }
    if let Some(&new) = desired.iter().find(|peer| !voters.contains(peer)) {
        return Some(EntryKind::AddVoter(new));
    }
    (!desired.contains(&this) && voters.contains(&this)).then_some(EntryKind::RemoveVoter(this))
}

impl StreamTask {
    /// The leader proposes the next membership change towards the voters
    /// the meta group gave the stream (one in flight at a time; Raft
    /// refuses a second until the first committed). Removing itself, it
    /// hands leadership to another desired voter instead: that leader
    /// removes it.
    /// The meta group placed the stream on `peers`.
    pub(super) fn place_on(&mut self, peers: Vec<u64>) {
        let this = self.groups.node(self.group, Node::id);
        self.placed_elsewhere = !peers.contains(&this);
        if self.placed_elsewhere {
            // The group may have removed this node before the meta group's
            // placement reached it (the stream's leader applied the
            // placement first): then nothing more comes, and the copy goes
            // now.
            let in_latest = self
                .groups
                .node(self.group, |node: &Node| node.membership().contains(this));
            if self.handle.is_replicated() && !self.membership.contains(this) && !in_latest {
                log::info!(target: "tern::jetstream", "stream {}: placed elsewhere ({peers:x?}); the group already removed this replica", self.handle.name);
                self.removed_from_group = true;
                return;
            }
            log::info!(target: "tern::jetstream", "stream {}: placed elsewhere ({peers:x?}); this replica stays a voter until the group removes it", self.handle.name);
        }
        if peers.len() > 1 && !self.handle.is_replicated() {
            self.become_replicated();
        }
        self.desired_peers = Some(peers);
        self.change_membership();
    }

    /// A one-voter stream about to gain voters: from now on it runs as a
    /// replicated stream (subscribed only while it leads, its log kept for
    /// followers), and its node's log, compacted to what applied, has a
    /// point a new replica is sent.
    fn become_replicated(&mut self) {
        let applied = self.replica.state.applied_index;
        let term = self.replica.state.applied_term;
        if applied > 0
            && self
                .groups
                .node(self.group, |node: &Node| node.log().snapshot_index())
                < applied
        {
            let membership = self.membership.clone();
            self.groups.compact(
                self.group,
                tern_raft::Snapshot {
                    index: applied,
                    term,
                    membership,
                },
            );
        }
        if applied > 0 {
            self.replica.mark_snapshot();
        }
        self.compacted_index = applied;
        self.handle.replicated.set(true);
        log::info!(target: "tern::jetstream", "stream {}: gains voters (from index {applied})", self.handle.name);
    }

    pub(super) fn change_membership(&mut self) {
        let Some(desired) = self.desired_peers.clone() else {
            return;
        };
        if !self.is_leading() {
            return;
        }
        let (voters, this) = self.groups.node(self.group, |node: &Node| {
            (node.membership().voters.clone(), node.id())
        });
        let Some(change) = next_change(&voters, &desired, this) else {
            self.desired_peers = None;
            return;
        };
        if change == EntryKind::RemoveVoter(this) {
            let target = self
                .groups
                .node(self.group, Node::most_caught_up_peer)
                .filter(|candidate| desired.contains(candidate));
            if let Some(target) = target {
                log::info!(target: "tern::jetstream", "stream {}: this node leaves the stream's voters; leadership goes to node {target:x} first", self.handle.name);
                self.groups
                    .with_node(self.group, |node| node.transfer_leadership(target));
            }
            return;
        }
        match self
            .groups
            .with_node(self.group, |node| node.propose_membership(change.clone()))
        {
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
    /// in the config file for a restart.
    pub(super) async fn membership_applied(
        &mut self,
        change: EntryKind,
    ) -> Result<(), StreamFailure> {
        let mut voters = self.membership.voters.clone();
        match &change {
            EntryKind::AddVoter(node) => voters.push(*node),
            EntryKind::RemoveVoter(node) => voters.retain(|voter| voter != node),
            EntryKind::Normal(_) | EntryKind::Noop => unreachable!("a membership entry"),
        }
        self.membership = Membership::new(voters);
        // Removed for good: placed elsewhere, and no later entry in the
        // log adds it back (a replica that rejoined replays its old
        // removal on the way).
        let (this, in_latest) = self.groups.node(self.group, |node: &Node| {
            (node.id(), node.membership().contains(node.id()))
        });
        if change == EntryKind::RemoveVoter(this) && self.placed_elsewhere && !in_latest {
            self.removed_from_group = true;
        }
        log::info!(target: "tern::jetstream", "stream {}: voters now {:x?}", self.handle.name, self.membership.voters);
        if let Some(files) = &self.files {
            let stored = self.js.stored_config_json(
                self.group,
                &self.replica.state.config.to_stored_json(),
                &self.membership.voters,
            );
            persist::write_config(files, stored.as_bytes(), self.created_unix_ns).await?;
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
        let (hard_state, acknowledged_index) = self.groups.node(self.group, |node: &Node| {
            (node.hard_state(), node.log().last_index())
        });
        self.groups.remove(self.group);
        let js = self.js.clone();
        js.forget_stream(&self.handle);
        let reason = self.failure.clone().unwrap_or_default();
        let rebuild = super::super::Rebuild {
            config: (*self.replica.state.config).clone(),
            created_unix_ns: self.created_unix_ns,
            group: self.group,
            peers: self.membership.voters.clone(),
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
        self.js.journal().checkpoint(self.group, u64::MAX);
        let result = self.js.remove_stream_files(&self.handle.name).await;
        self.js.forget_stream(&self.handle);
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_remove_others_first_then_add_then_remove_this_node() {
        // A peer replaced: its removal first (the quorum never waits for
        // the new, empty replica), then the addition.
        assert_eq!(
            next_change(&[1, 2, 3], &[1, 2, 4], 1),
            Some(EntryKind::RemoveVoter(3))
        );
        assert_eq!(
            next_change(&[1, 2], &[1, 2, 4], 1),
            Some(EntryKind::AddVoter(4))
        );
        assert_eq!(next_change(&[1, 2, 4], &[1, 2, 4], 1), None);
        // Three to five, and back.
        assert_eq!(
            next_change(&[1, 2, 3], &[1, 2, 3, 4, 5], 2),
            Some(EntryKind::AddVoter(4))
        );
        assert_eq!(
            next_change(&[1, 2, 3, 4, 5], &[1, 2, 3], 2),
            Some(EntryKind::RemoveVoter(4))
        );
        // The leader leaving: the others first, itself last.
        assert_eq!(
            next_change(&[1, 2, 3], &[2, 3, 4], 1),
            Some(EntryKind::AddVoter(4))
        );
        assert_eq!(
            next_change(&[1, 2, 3, 4], &[2, 3, 4], 1),
            Some(EntryKind::RemoveVoter(1))
        );
    }
}
