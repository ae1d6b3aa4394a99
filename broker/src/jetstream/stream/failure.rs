//! Why a stream task stops. The stream then goes offline: every reply owed
//! fails with nats-server's store error carrying this text, later requests
//! get 10118 (stream offline), and stream info reports it, until a restart
//! (or an operator's `tern storage repair`) brings the stream back.

use tern_raft::ProposeError;
use tern_storage::block_store::StoreError;
use tern_storage::{DeviceError, JournalError};

use super::super::persist::PersistError;
use super::consumer_leader::{LoggedConsumerError, StateEntryTooLarge};
use super::replica::ReplicaError;
use crate::cluster::multiraft::GroupError;

#[derive(Debug, Clone, thiserror::Error)]
pub enum StreamFailure {
    /// The block store failed: an I/O error, or damage found while reading.
    #[error("{0}")]
    Store(#[from] StoreError),
    /// Opening the block store's directory.
    #[error("opening {directory}: {source}")]
    Open {
        directory: String,
        source: DeviceError,
    },
    /// The block store's files do not match the checkpoint.
    #[error("{directory}: {source}")]
    Recover {
        directory: String,
        source: StoreError,
    },
    /// The shard's journal stopped (every file stream of the shard stops).
    #[error("{0}")]
    Journal(#[from] JournalError),
    /// The shard could not run the stream's Raft group.
    #[error("{0}")]
    Group(#[from] GroupError),
    /// A checkpoint file (`raft`, `consumers`) could not be written or read.
    #[error("{0}")]
    Persist(#[from] PersistError),
    /// The only voter refused its own proposal: a bug, never expected.
    #[error("{what} refused: {error:?}")]
    Refused {
        what: &'static str,
        error: ProposeError,
    },
    /// A durable consumer in the `consumers` file that this build cannot
    /// run (its config or delivery state does not decode).
    #[error("consumers file: {0}")]
    ConsumersFileEntry(LoggedConsumerError),
    /// A durable consumer whose delivery state outgrew a journal record.
    #[error(transparent)]
    ConsumerStateTooLarge(#[from] StateEntryTooLarge),
    /// The consumers file is missing or not the one the checkpoint names.
    #[error("{path} {problem}")]
    ConsumersFile { path: String, problem: String },
    /// A snapshot received from the leader could not be installed.
    #[error("installing the leader's snapshot at index {index}: {reason}")]
    SnapshotInstall { index: u64, reason: String },
    /// A durable consumer the log holds that the leader cannot run.
    #[error("{0}")]
    LoggedConsumer(#[from] LoggedConsumerError),
}

impl From<ReplicaError> for StreamFailure {
    fn from(error: ReplicaError) -> StreamFailure {
        match error {
            ReplicaError::Store(error) => StreamFailure::Store(error),
            ReplicaError::Consumer(error) => StreamFailure::LoggedConsumer(error),
            ReplicaError::StateEntry(error) => StreamFailure::ConsumerStateTooLarge(error),
        }
    }
}

impl StreamFailure {
    /// Damage to this replica's own files (the block store, the consumers
    /// file), found opening or reading them: what a replica of a
    /// replicated stream rebuilds from its peers.
    pub fn is_local_damage(&self) -> bool {
        matches!(
            self,
            StreamFailure::Store(_)
                | StreamFailure::Open { .. }
                | StreamFailure::Recover { .. }
                | StreamFailure::ConsumersFileEntry(_)
                | StreamFailure::ConsumersFile { .. }
        )
    }
}
