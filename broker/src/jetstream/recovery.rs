//! Opening JetStream on a shard: what the store holds is found and brought
//! back, in this order:
//!
//! 1. the stream directories (`streams/<name>/{config,raft}`): the streams
//!    this shard owns with their checkpoint; on the meta shard, every
//!    stream's config for the catalog;
//! 2. the shard's journal, replayed into each group's records past its
//!    checkpoint (in a cluster, shard 0's meta group too, after its
//!    checkpoint `meta/state`); in a cluster, the votes file (the second
//!    copy of every group's term and vote): a damaged journal is replaced
//!    when every group can rejoin from its peers, a lost meta checkpoint
//!    rejoins, and the file is written again; then the Raft groups' driver
//!    and the meta group run;
//! 3. each stream, started from its checkpoint and the journal (rebuilt
//!    from its peers when its own files are damaged and it has peers);
//! 4. the API's subscription.
//!
//! What cannot be read is either refused, and the server does not start
//! ([`RecoveryError`]: another server's journal, an unreadable directory, a
//! lost meta state it cannot rejoin), or kept offline with its reason
//! (a stream's damaged files, the shard's [`JournalDamage`]); nothing is
//! deleted. Formats: docs/jetstream-format.md.

use std::path::{Path, PathBuf};
use std::rc::Rc;

use rustc_hash::{FxHashMap, FxHashSet};
use tern_storage::block_store::DmaFiles;
use tern_storage::dma::{DmaDevice, SyncMethod};
use tern_storage::free_space::{filesystem_space_bytes, FreeSpace};
use tern_storage::{DeviceError, Journal, JournalConfig, JournalError};

use super::cluster::{self, MetaStoreError};
use super::journal_location::JournalLocation;
use super::meta::cluster::META_GROUP;
use super::persist::{self, PersistError, StreamFilesError};
use super::stream::config::{StorageType, StreamConfig};
use super::stream::failure::StreamFailure;
use super::stream::groups::StreamGroups;
use super::stream::{Recovered, StreamHandle};
use super::{
    decode_stored_config, decode_stored_peers, entry, layout, now_unix_ns, owner_of, votes,
    JetStream, Rebuild, ShardServices, StoredConfigFileError, CREATING_PREFIX,
    JOURNAL_BATCH_BYTES_MIN, META_SHARD,
};
use crate::config::JetStreamConfig;

/// Why JetStream cannot open on this shard: the server does not start.
/// Each names the file, directory or journal, and the cause.
#[derive(Debug, thiserror::Error)]
pub enum RecoveryError {
    /// A directory or file of the store could not be created, read,
    /// written or removed.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The store's filesystem could not be asked its size.
    #[error("statvfs {}: {source}", path.display())]
    Statvfs {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A stream's (or the votes file's) directory could not be opened.
    #[error("{}: {source}", directory.display())]
    Files {
        directory: PathBuf,
        source: DeviceError,
    },
    /// The journal's device could not be opened.
    #[error("journal {location}: {source}")]
    JournalDevice {
        location: JournalLocation,
        source: DeviceError,
    },
    /// The journal is not this store's, or not readable by this version
    /// (damage is a [`JournalDamage`], not this).
    #[error("journal {location}: {source}")]
    Journal {
        location: JournalLocation,
        source: JournalError,
    },
    /// The votes file could not be written.
    #[error("{}: {source}", directory.display())]
    Votes {
        directory: PathBuf,
        source: PersistError,
    },
    /// The meta checkpoint is lost, and the node cannot rejoin without
    /// risking a second vote in a term (its votes are not kept, or the
    /// journal is damaged too).
    #[error("{reason}: this node's meta state was lost; restore the file or remove this node's JetStream data and let it rejoin")]
    MetaStateLost { reason: MetaCheckpointLoss },
    #[error(transparent)]
    Meta(#[from] MetaStoreError),
}

impl RecoveryError {
    /// The error of an I/O operation on `path`.
    fn io(path: &Path) -> impl FnOnce(std::io::Error) -> RecoveryError {
        let path = path.to_path_buf();
        move |source| RecoveryError::Io { path, source }
    }
}

/// Why the meta group's checkpoint is lost.
#[derive(Debug, Clone, thiserror::Error)]
pub enum MetaCheckpointLoss {
    /// It does not read back ([`cluster::Meta::checkpoint_damage`]).
    #[error("{0}")]
    Damaged(String),
    /// It is gone, but this node voted or acknowledged meta entries.
    #[error("{} is missing but the journal or the votes file hold meta group records", path.display())]
    Missing { path: PathBuf },
}

/// Why the shard's journal cannot be used: its file streams stay offline
/// and no new one is created on it (nothing is deleted; see `tern storage
/// check`); everything else runs.
#[derive(Debug, Clone, thiserror::Error)]
pub enum JournalDamage {
    #[error("journal {} is missing ({file_streams} file stream(s) of this shard keep their newest messages there)", directory.display())]
    MissingWithStreams {
        directory: PathBuf,
        file_streams: usize,
    },
    #[error("journal {} is missing ({} records that it was formatted)", directory.display(), marker.display())]
    MissingFormatted { directory: PathBuf, marker: PathBuf },
    /// A segment file missing or shortened.
    #[error("journal damaged: {0}")]
    SegmentFiles(String),
    /// A batch that fails its checks, not a torn tail.
    #[error("journal damaged: {file} at offset {offset}: {reason}")]
    Corrupt {
        file: String,
        offset: u64,
        reason: String,
    },
    #[error("journal {location} cannot be read: {source}")]
    Unreadable {
        location: JournalLocation,
        source: DeviceError,
    },
    #[error("journal {location} holds nothing, but {} records that it was formatted: it was erased or replaced", marker.display())]
    Erased {
        location: JournalLocation,
        marker: PathBuf,
    },
    #[error("journal {location} holds a checksummed record that does not decode: {source}")]
    Undecodable {
        location: JournalLocation,
        source: entry::DecodeError,
    },
}

/// Why a damaged journal was not replaced by a fresh one (it stays, and
/// the shard's file streams stay offline).
#[derive(Debug, thiserror::Error)]
pub enum JournalReplacementError {
    #[error("stream {stream} has one replica: the journal may hold its only copy")]
    SingleReplica { stream: String },
    #[error(
        "stream {stream} is offline and may have one replica: the journal may hold its only copy"
    )]
    OfflineSingleReplica { stream: String },
    #[error("moving {} aside: {source}", directory.display())]
    MoveAside {
        directory: PathBuf,
        source: std::io::Error,
    },
    #[error("zeroing {location}: {source}")]
    Zero {
        location: JournalLocation,
        source: std::io::Error,
    },
    #[error("a new journal at {location}: {damage}")]
    NewJournalDamaged {
        location: JournalLocation,
        damage: Box<JournalDamage>,
    },
    #[error(transparent)]
    Open(#[from] RecoveryError),
}

/// Why a stream could not be started: created, or rebuilt from its peers.
#[derive(Debug, thiserror::Error)]
pub enum StreamStartError {
    #[error("JetStream on shard {shard} cannot store file streams until its journal is repaired: {damage}")]
    JournalDamaged { shard: usize, damage: String },
    #[error(transparent)]
    Files(#[from] StreamFilesError),
    #[error(transparent)]
    Failure(#[from] StreamFailure),
}

impl From<PersistError> for StreamStartError {
    fn from(error: PersistError) -> StreamStartError {
        StreamStartError::Files(error.into())
    }
}

/// Why a stream found with its checkpoint stays offline.
#[derive(Debug, thiserror::Error)]
enum StreamOffline {
    /// Its task could not start on its files.
    #[error("{0}")]
    Failed(StreamFailure),
    /// Its files are damaged, and rebuilding it from its peers failed.
    #[error("{failure}; rebuilding from its peers: {rebuild}")]
    NotRebuilt {
        failure: StreamFailure,
        rebuild: StreamStartError,
    },
}

/// Which journal `open_journal` opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum JournalOpening {
    /// The shard's journal as the store left it: one its marker says was
    /// formatted must hold something.
    Existing,
    /// A new journal in place of a damaged one (set aside or zeroed).
    Replacement,
}

/// A stream this shard owns, as start-up found it on disk.
struct Found {
    name: String,
    config: StreamConfig,
    created_unix_ns: u64,
    group: u64,
    files: DmaFiles,
    raft: persist::RaftState,
    peers: Vec<u64>,
}

/// The stream directories as step 1 found them.
#[derive(Default)]
struct FoundStreams {
    /// The streams this shard owns, with their checkpoint.
    owned: Vec<Found>,
    /// Replicas whose `raft` file (checkpoint, term and vote) or config is
    /// lost, and why: rebuilt from their peers if the votes file kept
    /// their term and vote.
    checkpoint_lost: Vec<(Found, String)>,
}

/// Each group's applied index and what the journal holds for it past
/// that, by group.
type Wanted = FxHashMap<u64, (u64, Recovered)>;

/// What a group starts from before the journal is read.
fn recovered_from(raft: Option<persist::RaftState>, peers: Vec<u64>) -> Recovered {
    Recovered {
        raft,
        hard_state: None,
        entries: Vec::new(),
        peers,
        acknowledged_index: 0,
        joining: false,
        entries_lost_through_term: 0,
    }
}

/// What the votes file step leaves for the groups and streams.
struct VotesRecovered {
    /// The votes file's directory and what it holds now (the groups keep
    /// it as they vote); `None` when the journal is damaged.
    copy: Option<(DmaFiles, votes::Votes)>,
    /// Every group's kept term and vote.
    kept: votes::Votes,
}

/// The shard's view of free space under `root`: the configured reserve or
/// the default for the filesystem's size, looked at again after each shard
/// wrote half the reserve split over the shards (see `free_space`).
fn storage_reserve(
    root: &Path,
    config: &JetStreamConfig,
    shard_count: usize,
) -> Result<FreeSpace, RecoveryError> {
    let reserve_bytes = match config.storage_reserve_bytes {
        Some(bytes) => bytes,
        None => {
            let (_, filesystem_bytes) =
                filesystem_space_bytes(root).map_err(|source| RecoveryError::Statvfs {
                    path: root.to_path_buf(),
                    source,
                })?;
            crate::config::default_storage_reserve_bytes(filesystem_bytes)
        }
    };
    let recheck_bytes = (reserve_bytes / (2 * shard_count.max(1) as u64)).max(1);
    Ok(FreeSpace::new(reserve_bytes, recheck_bytes))
}

/// The stream's stored config: its group, config, creation time and
/// voters.
async fn read_stored_config(
    directory: &Path,
    files: &DmaFiles,
) -> Result<(u64, StreamConfig, u64, Vec<u64>), StreamFileDamage> {
    let path = directory.join(persist::CONFIG_FILE);
    match persist::read_config(files).await {
        Ok(Some((json, created))) => decode_stored_config(&json)
            .map(|(group, config)| (group, config, created, decode_stored_peers(&json)))
            .map_err(|source| StreamFileDamage::Config { path, source }),
        // A stream directory is renamed into place with its config:
        // without one, the config was lost, not never written.
        Ok(None) => Err(StreamFileDamage::Missing { path }),
        Err(source) => Err(StreamFileDamage::Unreadable { path, source }),
    }
}

/// The stream's checkpoint (`raft`).
async fn read_checkpoint(
    directory: &Path,
    files: &DmaFiles,
) -> Result<persist::RaftState, StreamFileDamage> {
    let path = directory.join(persist::RAFT_FILE);
    match persist::read_raft(files).await {
        Ok(Some(raft)) => Ok(raft),
        // Written when the stream was created: its checkpoint is lost.
        Ok(None) => Err(StreamFileDamage::Missing { path }),
        Err(source) => Err(StreamFileDamage::Unreadable { path, source }),
    }
}

/// Why a stream's `config` or `raft` file does not read back: the stream
/// stays offline with this reason (or rebuilds from its peers).
#[derive(Debug, thiserror::Error)]
enum StreamFileDamage {
    #[error("{} is missing (the stream's other files are kept)", path.display())]
    Missing { path: PathBuf },
    #[error("{}: {source}", path.display())]
    Unreadable { path: PathBuf, source: PersistError },
    #[error("{}: {source}", path.display())]
    Config {
        path: PathBuf,
        source: StoredConfigFileError,
    },
}

/// One journal record replayed into the group it belongs to; a record of
/// a group nobody wants is an orphan, one that does not decode is damage.
fn replay_record(
    wanted: &mut Wanted,
    orphans: &mut FxHashSet<u64>,
    decode_failure: &mut Option<entry::DecodeError>,
    record: tern_storage::format::RecordView<'_>,
) {
    let header = record.header;
    let Some((applied, recovered)) = wanted.get_mut(&header.group) else {
        orphans.insert(header.group);
        return;
    };
    match header.kind {
        entry::RECORD_HARD_STATE => match entry::decode_hard_state(record.body) {
            Ok(hard_state) => recovered.hard_state = Some(hard_state),
            Err(error) => *decode_failure = Some(error),
        },
        // A snapshot installed: what came before is void.
        entry::RECORD_SNAPSHOT => recovered.entries.clear(),
        kind if entry::is_entry_record(kind) && header.index > *applied => {
            match entry::entry_kind(header.kind, record.body) {
                Ok(kind) => {
                    // A later record for an index replaces it and
                    // everything after it (a rewritten suffix).
                    while recovered
                        .entries
                        .last()
                        .is_some_and(|entry| entry.index >= header.index)
                    {
                        recovered.entries.pop();
                    }
                    recovered.entries.push(tern_raft::Entry {
                        term: header.term,
                        index: header.index,
                        kind,
                    });
                    let entries = &recovered.entries;
                    assert!(
                        entries.len() < 2 || entries[entries.len() - 2].index < header.index,
                        "a group's replayed entries are in index order"
                    );
                }
                Err(error) => *decode_failure = Some(error),
            }
        }
        _ => {}
    }
}

/// Each group's newest hard state (the journal's, the votes file's and the
/// checkpoint's), and the term through which its entries are lost: the
/// votes file as it is written again. `lost_groups` lost their entries
/// now (a replaced journal: all; a lost meta checkpoint: the meta group).
fn latest_votes(
    wanted: &mut Wanted,
    stored: Option<&votes::Votes>,
    meta: Option<&cluster::Meta>,
    lost_groups: impl Fn(u64) -> bool,
) -> votes::Votes {
    let mut latest = votes::Votes::new();
    for (&group, (_, recovered)) in wanted.iter_mut() {
        let stored = stored.and_then(|stored| stored.get(&group).copied());
        recovered.hard_state =
            votes::newer(recovered.hard_state, stored.map(|kept| kept.hard_state));
        let (checkpointed, applied_term) = match (&recovered.raft, meta) {
            (Some(raft), _) => (
                Some(tern_raft::HardState {
                    term: raft.term,
                    vote: (raft.vote != 0).then_some(raft.vote),
                }),
                raft.applied_term,
            ),
            (None, Some(meta)) if group == META_GROUP => {
                let (state, applied_term) = meta.checkpointed();
                (Some(state), applied_term)
            }
            (None, _) => (None, 0),
        };
        let newest = votes::newer(recovered.hard_state, checkpointed);
        assert!(
            newest.map_or(0, |state| state.term) >= checkpointed.map_or(0, |state| state.term),
            "group {group}: the newest hard state is at least the checkpoint's"
        );
        let mut lost_through_term = stored.map_or(0, |kept| kept.lost_through_term);
        if lost_groups(group) {
            lost_through_term = lost_through_term
                .max(newest.map_or(0, |state| state.term))
                .max(applied_term);
        }
        recovered.entries_lost_through_term = lost_through_term;
        if let Some(hard_state) = newest {
            latest.insert(
                group,
                votes::GroupVotes {
                    hard_state,
                    lost_through_term,
                },
            );
        }
    }
    latest
}

impl JetStream {
    /// Opens this shard's journal and recovers the streams it owns; the meta
    /// shard also loads the catalog. Registers the API subscription and the
    /// streams' subscriptions.
    pub async fn open(
        services: ShardServices,
        config: JetStreamConfig,
    ) -> Result<Rc<JetStream>, RecoveryError> {
        let root = services.store_dir.join("jetstream");
        std::fs::create_dir_all(&root).map_err(RecoveryError::io(&root))?;
        let free_space = storage_reserve(&root, &config, services.shard_count)?;
        if services.index == META_SHARD {
            log::info!(
                target: "tern::jetstream",
                "JetStream keeps {} MiB free on {} (storage_reserve): publishes to file streams are refused below it",
                free_space.reserve_bytes() >> 20,
                root.display()
            );
            let trash = root.join("trash");
            if trash.exists() {
                std::fs::remove_dir_all(&trash).map_err(RecoveryError::io(&trash))?;
            }
        }
        let js = JetStream::new(services, config, root, free_space);
        let shard = js.shard();
        // 1. Stream configs (and, for owned streams, Raft state).
        let found = js.find_streams(shard).await?;
        // 2. The journal: records of owned streams past their checkpoint.
        let mut wanted: Wanted = found
            .owned
            .iter()
            .map(|found| {
                let recovered = recovered_from(Some(found.raft.clone()), found.peers.clone());
                (found.group, (found.raft.applied_index, recovered))
            })
            .collect();
        js.open_meta(shard, &mut wanted).await?;
        let location = JournalLocation::of(&js.config, js.index);
        let mut journal_damage = js
            .replay_journal(shard, &location, &found, &mut wanted)
            .await?;
        // In a cluster, the second copy of every group's hard state.
        let votes = if shard.routes.is_some() {
            js.recover_votes(shard, &location, &found, &mut wanted, &mut journal_damage)
                .await?
        } else {
            VotesRecovered {
                copy: None,
                kept: votes::Votes::new(),
            }
        };
        js.start_groups(shard, votes.copy);
        js.start_meta_group(&mut wanted, journal_damage.is_some());
        if let Some(damage) = &journal_damage {
            log::error!(target: "tern::jetstream", "shard {}: {damage}; the file streams of this shard stay offline and new ones cannot be created on it until the journal is repaired (nothing was deleted; see `tern storage check`)", js.index);
            *js.journal_damage.borrow_mut() = Some(damage.to_string());
        }
        // 3. Streams.
        let damage = journal_damage.map(|damage| damage.to_string());
        js.start_found_streams(found.owned, &mut wanted, damage.as_deref())
            .await;
        js.rebuild_lost_checkpoints(found.checkpoint_lost, &votes.kept, damage.is_some())
            .await;
        // 4. The API.
        js.subscribe_api();
        if let Some(meta) = js.meta.get() {
            js.subscribe_gather_inbox(meta.node_id);
        }
        assert!(js.groups.get().is_some(), "the Raft groups' driver runs");
        Ok(js)
    }

    /// Step 1: the stream directories, each read as [`Self::find_stream`]
    /// says, after the leftovers of creations that never completed are
    /// removed.
    async fn find_streams(&self, shard: &ShardServices) -> Result<FoundStreams, RecoveryError> {
        let streams_directory = self.root.join("streams");
        std::fs::create_dir_all(&streams_directory)
            .map_err(RecoveryError::io(&streams_directory))?;
        let mut names: Vec<String> = std::fs::read_dir(&streams_directory)
            .map_err(RecoveryError::io(&streams_directory))?
            .filter_map(|entry| entry.ok())
            .filter(|entry| entry.path().is_dir())
            .filter_map(|entry| entry.file_name().into_string().ok())
            .collect();
        names.sort();
        // Creations that never completed (never answered): a stream is
        // created under a hidden name and renamed into place when whole.
        for name in names
            .iter()
            .filter_map(|name| name.strip_prefix(CREATING_PREFIX))
        {
            if owner_of(name, self.shard_count) == self.index {
                let path = streams_directory.join(format!("{CREATING_PREFIX}{name}"));
                std::fs::remove_dir_all(&path).map_err(RecoveryError::io(&path))?;
            }
        }
        names.retain(|name| !name.starts_with('.'));
        let mut found = FoundStreams::default();
        for name in names {
            let owner = owner_of(&name, self.shard_count);
            if owner != self.index && self.index != META_SHARD {
                continue;
            }
            let directory = streams_directory.join(&name);
            self.find_stream(shard, name, &directory, &mut found)
                .await?;
        }
        Ok(found)
    }

    /// One stream directory: its config goes to the catalog (meta shard);
    /// a stream this shard owns is found with its checkpoint, or offline
    /// with why (a replica rebuilds from its peers).
    async fn find_stream(
        &self,
        shard: &ShardServices,
        name: String,
        directory: &Path,
        found: &mut FoundStreams,
    ) -> Result<(), RecoveryError> {
        assert!(
            self.index == META_SHARD || owner_of(&name, self.shard_count) == self.index,
            "stream {name} is read by its owner shard or the meta shard"
        );
        let files = DmaFiles::open(directory)
            .await
            .map_err(|source| RecoveryError::Files {
                directory: directory.to_path_buf(),
                source,
            })?;
        let (group, config, created_unix_ns, peers) =
            match read_stored_config(directory, &files).await {
                Ok(loaded) => loaded,
                Err(damage) => {
                    let reason = damage.to_string();
                    self.config_damaged(shard, name, files, reason, found).await;
                    return Ok(());
                }
            };
        if self.index == META_SHARD {
            self.catalog
                .borrow_mut()
                .load(name.clone(), Some(config.clone()));
        }
        if owner_of(&name, self.shard_count) != self.index {
            return Ok(());
        }
        let mut stream = Found {
            name,
            config,
            created_unix_ns,
            group,
            files,
            raft: persist::RaftState::created(1),
            peers,
        };
        match read_checkpoint(directory, &stream.files).await {
            Ok(raft) => {
                stream.raft = raft;
                found.owned.push(stream);
            }
            // A replica in a cluster: rebuilt from its peers once the
            // groups run, if the votes file has its term and vote.
            Err(damage) if stream.peers.len() > 1 && shard.routes.is_some() => {
                found.checkpoint_lost.push((stream, damage.to_string()));
            }
            Err(damage) => {
                let reason = damage.to_string();
                log::error!(target: "tern::jetstream", "stream {}: {reason}; the stream stays offline (nothing was deleted)", stream.name);
                self.damaged
                    .borrow_mut()
                    .insert(stream.name.clone(), reason);
                self.damaged_configs
                    .borrow_mut()
                    .insert(stream.name, Box::new(stream.config));
            }
        }
        Ok(())
    }

    /// A stream whose config does not read back (`reason`). A replica in a
    /// cluster: the meta group's catalog has its config and placement; it
    /// rebuilds from its peers as when its checkpoint is lost (the
    /// leader's snapshot brings the config in force). Otherwise it stays
    /// offline.
    async fn config_damaged(
        &self,
        shard: &ShardServices,
        name: String,
        files: DmaFiles,
        reason: String,
        found: &mut FoundStreams,
    ) {
        let this_node = shard.routes.as_ref().map(|routes| routes.node_id());
        let catalog = match this_node {
            Some(node) => {
                cluster::catalog_entry(&self.root, &name)
                    .await
                    .filter(|(_, placement)| {
                        placement.peers.len() > 1 && placement.peers.contains(&node)
                    })
            }
            None => None,
        };
        let Some((config, placement)) = catalog else {
            log::error!(target: "tern::jetstream", "stream {name}: {reason}; the stream stays offline until its config is repaired (nothing was deleted)");
            self.damaged.borrow_mut().insert(name.clone(), reason);
            if self.index == META_SHARD {
                self.catalog.borrow_mut().load(name, None);
            }
            return;
        };
        if self.index == META_SHARD {
            self.catalog
                .borrow_mut()
                .load(name.clone(), Some(config.clone()));
        }
        if owner_of(&name, self.shard_count) == self.index {
            found.checkpoint_lost.push((
                Found {
                    name,
                    config,
                    created_unix_ns: placement.created_unix_ns,
                    group: placement.group,
                    files,
                    raft: persist::RaftState::created(1),
                    peers: placement.peers,
                },
                format!("{reason} (its config taken from the meta group's catalog)"),
            ));
        }
    }

    /// In a cluster, shard 0 also runs the meta group: its checkpoint, and
    /// its records in the journal past it.
    async fn open_meta(
        &self,
        shard: &ShardServices,
        wanted: &mut Wanted,
    ) -> Result<(), RecoveryError> {
        let Some(routes) = shard.routes.as_ref().filter(|_| self.index == META_SHARD) else {
            return Ok(());
        };
        let meta = cluster::Meta::open(routes.node_id(), &self.root.join("meta")).await?;
        wanted.insert(
            META_GROUP,
            (meta.applied_index(), recovered_from(None, Vec::new())),
        );
        let _ = self.meta.set(Rc::new(meta));
        Ok(())
    }

    /// Step 2: the journal replayed into `wanted`, and run if it is whole;
    /// otherwise its damage.
    async fn replay_journal(
        &self,
        shard: &ShardServices,
        location: &JournalLocation,
        found: &FoundStreams,
        wanted: &mut Wanted,
    ) -> Result<Option<JournalDamage>, RecoveryError> {
        let mut orphans = FxHashSet::default();
        let mut decode_failure = None;
        let file_streams = found
            .owned
            .iter()
            .filter(|found| found.config.storage == StorageType::File)
            .count();
        let opened = self
            .open_journal(
                location,
                file_streams,
                JournalOpening::Existing,
                shard,
                |record| replay_record(wanted, &mut orphans, &mut decode_failure, record),
            )
            .await?;
        match (opened, decode_failure) {
            (Ok(journal), None) => {
                // A replica whose checkpoint was lost is rebuilt below under
                // the same group: its records stay wanted (a group
                // checkpointed through u64::MAX would have its new records
                // recycled before its store holds them).
                for group in orphans {
                    if !found
                        .checkpoint_lost
                        .iter()
                        .any(|(found, _)| found.group == group)
                    {
                        journal.checkpoint(group, u64::MAX);
                    }
                }
                self.run_journal(journal);
                Ok(None)
            }
            (Ok(_), Some(source)) => Ok(Some(JournalDamage::Undecodable {
                location: location.clone(),
                source,
            })),
            (Err(damage), _) => Ok(Some(damage)),
        }
    }

    /// Step 2, in a cluster: the votes file read; a damaged journal
    /// replaced when the votes file is there (`journal_damage` cleared);
    /// a lost meta checkpoint rejoins or refuses the start; every group's
    /// newest term and vote written back (unless the journal is damaged).
    async fn recover_votes(
        &self,
        shard: &ShardServices,
        location: &JournalLocation,
        found: &FoundStreams,
        wanted: &mut Wanted,
        journal_damage: &mut Option<JournalDamage>,
    ) -> Result<VotesRecovered, RecoveryError> {
        let index = self.index;
        let votes_directory = votes::directory(&self.root, index);
        let files =
            DmaFiles::open(&votes_directory)
                .await
                .map_err(|source| RecoveryError::Files {
                    directory: votes_directory.clone(),
                    source,
                })?;
        let stored = match votes::read(&files).await {
            Ok(stored) => stored,
            Err(error) => {
                log::error!(target: "tern::jetstream", "shard {index}: {}: {error}; rewritten from the journal", votes_directory.join(votes::VOTES_FILE).display());
                None
            }
        };
        let stored_for = |group: u64| {
            stored
                .as_ref()
                .and_then(|stored| stored.get(&group).copied())
        };
        // A damaged journal, in a cluster, with the hard states intact
        // here: a fresh journal, and every group rejoins from its
        // checkpoint and catches up from its peers.
        let salvaged = match (&*journal_damage, &stored) {
            (Some(damage), Some(_)) => {
                self.salvage_journal(location, shard, damage, &found.owned, wanted)
                    .await
            }
            _ => false,
        };
        if salvaged {
            *journal_damage = None;
        }
        let meta_stored = stored_for(META_GROUP).is_some();
        let meta_lost =
            self.check_meta_checkpoint(wanted, meta_stored, journal_damage.is_some())?;
        let meta = self.meta.get().map(Rc::as_ref);
        let mut latest = latest_votes(wanted, stored.as_ref(), meta, |group| {
            salvaged || (group == META_GROUP && meta_lost)
        });
        for (found, _) in &found.checkpoint_lost {
            if let Some(kept) = stored_for(found.group) {
                latest.insert(found.group, kept);
            }
        }
        let mut copy = None;
        if journal_damage.is_none() {
            votes::write(&files, &latest)
                .await
                .map_err(|source| RecoveryError::Votes {
                    directory: votes_directory,
                    source,
                })?;
            copy = Some((files, latest.clone()));
        }
        Ok(VotesRecovered { copy, kept: latest })
    }

    /// A damaged journal replaced by a fresh one (see
    /// [`Self::replace_damaged_journal`]): every group starts from its
    /// checkpoint, its journaled state gone. Whether it was replaced.
    async fn salvage_journal(
        &self,
        location: &JournalLocation,
        shard: &ShardServices,
        damage: &JournalDamage,
        owned: &[Found],
        wanted: &mut Wanted,
    ) -> bool {
        match self
            .replace_damaged_journal(location, shard, damage, owned)
            .await
        {
            Ok(journal) => {
                self.run_journal(journal);
                for (_, recovered) in wanted.values_mut() {
                    recovered.hard_state = None;
                    recovered.entries.clear();
                }
                true
            }
            Err(refused) => {
                log::error!(target: "tern::jetstream", "shard {}: the damaged journal cannot be replaced: {refused}", self.index);
                false
            }
        }
    }

    /// The meta checkpoint damaged, or gone while the journal or the votes
    /// file hold meta records: this node voted and acknowledged entries it
    /// no longer has. With its votes kept (`meta_stored`) it rejoins (its
    /// entries marked lost, its state from the leader): returns true;
    /// without them, starting as new could vote twice in a term: refused.
    fn check_meta_checkpoint(
        &self,
        wanted: &mut Wanted,
        meta_stored: bool,
        journal_damaged: bool,
    ) -> Result<bool, RecoveryError> {
        let Some(meta) = self.meta.get() else {
            return Ok(false);
        };
        let (_, recovered) = wanted.get_mut(&META_GROUP).expect("wanted above");
        let directory = self.root.join("meta");
        let journaled =
            recovered.hard_state.is_some() || !recovered.entries.is_empty() || meta_stored;
        let lost = meta
            .checkpoint_damage()
            .map(MetaCheckpointLoss::Damaged)
            .or_else(|| {
                (meta.voters().is_empty() && journaled).then(|| MetaCheckpointLoss::Missing {
                    path: directory.join(persist::META_STATE_FILE),
                })
            });
        let Some(reason) = lost else {
            return Ok(false);
        };
        if journal_damaged || !meta_stored {
            return Err(RecoveryError::MetaStateLost { reason });
        }
        meta.set_aside_damaged_checkpoint(&directory)?;
        assert!(meta.checkpoint_damage().is_none(), "set aside, not damage");
        log::warn!(target: "tern::jetstream", "{reason}; the meta group rejoins from its peers (its votes are kept in the votes file)");
        recovered.entries.clear();
        Ok(true)
    }

    /// The shard's Raft groups' driver, with the votes file's copy and, in
    /// a cluster, the routes as its transport.
    fn start_groups(&self, shard: &ShardServices, votes_copy: Option<(DmaFiles, votes::Votes)>) {
        let groups = StreamGroups::new(self.journal.get().cloned(), votes_copy);
        if let Some(routes) = shard.routes.as_ref() {
            let routes = Rc::downgrade(routes);
            groups.set_transport(Box::new(move |batch| {
                if let Some(routes) = routes.upgrade() {
                    routes.send_raft(batch);
                }
            }));
        }
        glommio::spawn_local(groups.clone().run()).detach();
        let _ = self.groups.set(groups);
    }

    /// The meta group (shard 0 in a cluster) runs with what the journal
    /// held for it, unless the journal is damaged.
    fn start_meta_group(self: &Rc<Self>, wanted: &mut Wanted, journal_damaged: bool) {
        let Some(meta) = self.meta.get() else {
            return;
        };
        if let Some((_, recovered)) = wanted.remove(&META_GROUP) {
            meta.set_recovered(
                recovered.hard_state,
                recovered.entries,
                recovered.entries_lost_through_term,
            );
        }
        if journal_damaged {
            log::error!(target: "tern::jetstream", "the meta group cannot run without shard 0's journal: JetStream answers 503 on this node");
            meta.fail("shard 0's journal is damaged".into());
        } else {
            glommio::spawn_local(self.clone().run_meta()).detach();
        }
    }

    /// Step 3: each stream found with its checkpoint starts from it and
    /// the contiguous entries after it; a damaged replica of a replicated
    /// stream rebuilds from its peers; the rest stay offline with why
    /// (`journal_damage`: every file stream).
    async fn start_found_streams(
        self: &Rc<Self>,
        owned: Vec<Found>,
        wanted: &mut Wanted,
        journal_damage: Option<&str>,
    ) {
        for found in owned {
            if let Some(damage) =
                journal_damage.filter(|_| found.config.storage == StorageType::File)
            {
                self.damaged
                    .borrow_mut()
                    .insert(found.name.clone(), damage.to_string());
                self.damaged_configs
                    .borrow_mut()
                    .insert(found.name.clone(), Box::new(found.config.clone()));
                continue;
            }
            let (_, recovered) = wanted.remove(&found.group).expect("collected above");
            let name = found.name.clone();
            let config = found.config.clone();
            if let Err(error) = self.start_found_stream(found, recovered).await {
                log::error!(target: "tern::jetstream", "stream {name}: {error}; the stream stays offline (nothing was deleted)");
                self.damaged
                    .borrow_mut()
                    .insert(name.clone(), error.to_string());
                self.damaged_configs
                    .borrow_mut()
                    .insert(name, Box::new(config));
            }
        }
    }

    /// One stream found with its checkpoint, started (or rebuilt from its
    /// peers); `Err`: why it stays offline.
    async fn start_found_stream(
        self: &Rc<Self>,
        found: Found,
        mut recovered: Recovered,
    ) -> Result<(), StreamOffline> {
        // Only a contiguous run after the checkpoint is usable; the
        // node acknowledged the rest and must have it again before it
        // votes (a gap: an installed snapshot's checkpoint not written).
        recovered.acknowledged_index = recovered
            .entries
            .last()
            .map_or(found.raft.applied_index, |entry| entry.index);
        let first = found.raft.applied_index + 1;
        let keep = recovered
            .entries
            .iter()
            .zip(first..)
            .take_while(|(entry, expected)| entry.index == *expected)
            .count();
        recovered.entries.truncate(keep);
        assert!(
            recovered
                .entries
                .first()
                .is_none_or(|entry| entry.index == first),
            "stream {}: the entries kept follow its checkpoint",
            found.name
        );
        let rebuild = Rebuild {
            config: found.config.clone(),
            created_unix_ns: found.created_unix_ns,
            group: found.group,
            peers: found.peers.clone(),
            previous: found.raft.clone(),
            hard_state: recovered.hard_state,
            acknowledged_index: recovered.acknowledged_index,
            entries_lost: false,
        };
        let started = self
            .start_stream(
                found.config,
                found.created_unix_ns,
                found.group,
                Some(found.files),
                recovered,
            )
            .await;
        match started {
            Ok(_) => Ok(()),
            // A replica of a replicated stream: its peers have it.
            // (Clustered, not "runs the meta group": only shard 0
            // does, and streams live on every shard.)
            Err(failure)
                if failure.is_local_damage() && rebuild.peers.len() > 1 && self.is_clustered() =>
            {
                match self.rebuild_from_peers(rebuild, &failure.to_string()).await {
                    Ok(_) => Ok(()),
                    Err(rebuild) => Err(StreamOffline::NotRebuilt { failure, rebuild }),
                }
            }
            Err(failure) => Err(StreamOffline::Failed(failure)),
        }
    }

    /// Replicas whose checkpoint was lost: rebuilt from their peers when
    /// the votes file kept their term and vote (without them, starting
    /// again could vote twice in a term: offline, as before).
    async fn rebuild_lost_checkpoints(
        self: &Rc<Self>,
        checkpoint_lost: Vec<(Found, String)>,
        kept_votes: &votes::Votes,
        journal_damaged: bool,
    ) {
        for (found, reason) in checkpoint_lost {
            let name = found.name.clone();
            let config = found.config.clone();
            let error = match kept_votes.get(&found.group).map(|kept| kept.hard_state) {
                Some(state) if !journal_damaged => {
                    let previous = persist::RaftState {
                        term: state.term,
                        vote: state.vote.unwrap_or(0),
                        ..persist::RaftState::created(1)
                    };
                    let rebuild = Rebuild {
                        config: found.config,
                        created_unix_ns: found.created_unix_ns,
                        group: found.group,
                        peers: found.peers,
                        previous,
                        hard_state: Some(state),
                        acknowledged_index: 0,
                        entries_lost: true,
                    };
                    match self.rebuild_from_peers(rebuild, &reason).await {
                        Ok(_) => continue,
                        Err(error) => format!("{reason}; rebuilding from its peers: {error}"),
                    }
                }
                Some(_) => format!("{reason} (and the journal is damaged)"),
                None => format!("{reason} (and the votes file has not its term and vote)"),
            };
            log::error!(target: "tern::jetstream", "stream {name}: {error}; the stream stays offline (nothing was deleted)");
            self.damaged.borrow_mut().insert(name.clone(), error);
            self.damaged_configs
                .borrow_mut()
                .insert(name, Box::new(config));
        }
    }

    /// The shard's journal, opened: its task runs and file streams use it.
    fn run_journal(&self, journal: Rc<Journal<DmaDevice>>) {
        glommio::spawn_local({
            let journal = journal.clone();
            async move { journal.run().await }
        })
        .detach();
        let _ = self.journal.set(journal);
    }

    /// A damaged journal in a cluster, every group's hard state kept in
    /// the votes file: the journal is moved aside (kept for the operator,
    /// under `<journal_dir>/damaged/`) and a fresh one takes its place;
    /// each group then rejoins from its checkpoint and catches up from its
    /// peers. Refused when the journal may hold the only copy of
    /// something: a file stream of one replica on this shard.
    async fn replace_damaged_journal(
        &self,
        location: &JournalLocation,
        shard: &ShardServices,
        damage: &JournalDamage,
        owned: &[Found],
    ) -> Result<Rc<Journal<DmaDevice>>, JournalReplacementError> {
        if let Some(single) = owned
            .iter()
            .find(|found| found.config.storage == StorageType::File && found.peers.len() <= 1)
        {
            return Err(JournalReplacementError::SingleReplica {
                stream: single.name.clone(),
            });
        }
        let offline_single = {
            let configs = self.damaged_configs.borrow();
            self.damaged
                .borrow()
                .keys()
                .find(|name| {
                    configs.get(*name).is_none_or(|config| {
                        config.storage == StorageType::File && config.num_replicas <= 1
                    })
                })
                .cloned()
        };
        if let Some(stream) = offline_single {
            return Err(JournalReplacementError::OfflineSingleReplica { stream });
        }
        self.clear_damaged_journal(location, damage)?;
        self.open_journal(location, 0, JournalOpening::Replacement, shard, |_| {})
            .await?
            .map_err(|damage| JournalReplacementError::NewJournalDamaged {
                location: location.clone(),
                damage: Box::new(damage),
            })
    }

    /// The damaged journal out of the way: its directory moved aside, or
    /// its region of the device zeroed.
    fn clear_damaged_journal(
        &self,
        location: &JournalLocation,
        damage: &JournalDamage,
    ) -> Result<(), JournalReplacementError> {
        match location {
            JournalLocation::Directory(directory) => {
                let parent = directory
                    .parent()
                    .expect("a shard's journal is in the journal directory");
                let damaged = parent.join("damaged");
                let name = directory
                    .file_name()
                    .expect("a shard's journal directory has a name")
                    .to_string_lossy()
                    .into_owned();
                let kept = damaged.join(format!("{name}.{}", now_unix_ns()));
                std::fs::create_dir_all(&damaged)
                    .and_then(|()| std::fs::rename(directory, &kept))
                    .and_then(|()| std::fs::File::open(parent)?.sync_all())
                    .and_then(|()| std::fs::File::open(&damaged)?.sync_all())
                    .map_err(|source| JournalReplacementError::MoveAside {
                        directory: directory.clone(),
                        source,
                    })?;
                log::warn!(target: "tern::jetstream", "shard {}: {damage}; the journal was moved to {} and a new one takes its place: every Raft group of this shard rejoins from its checkpoint and catches up from its peers (its votes are kept in the votes file)", self.index, kept.display());
            }
            JournalLocation::Region { device, offset, .. } => {
                let bytes =
                    u64::from(self.config.journal_segments) * self.config.journal_segment_bytes;
                tern_storage::journal_device::zero_range(device, *offset, bytes).map_err(
                    |source| JournalReplacementError::Zero {
                        location: location.clone(),
                        source,
                    },
                )?;
                log::warn!(target: "tern::jetstream", "shard {}: {damage}; the region of {location} was zeroed and a new journal takes its place: every Raft group of this shard rejoins from its checkpoint and catches up from its peers (its votes are kept in the votes file)", self.index);
            }
        }
        Ok(())
    }

    /// Opens this shard's journal, replaying its records into `on_record`.
    /// `Ok(Err(damage))`: the journal is damaged (a segment file missing or
    /// shortened, a batch that cannot be read): the shard's file streams
    /// stay offline, everything else runs. `Err`: the server must not start
    /// (another server's journal, another format, a broken device).
    async fn open_journal(
        &self,
        location: &JournalLocation,
        file_streams: usize,
        opening: JournalOpening,
        shard: &ShardServices,
        on_record: impl FnMut(tern_storage::format::RecordView<'_>),
    ) -> Result<Result<Rc<Journal<DmaDevice>>, JournalDamage>, RecoveryError> {
        assert!(
            opening == JournalOpening::Existing || file_streams == 0,
            "a replacement journal holds no stream's records"
        );
        let config = &self.config;
        let marker = layout::formatted_marker(&self.root, self.index);
        let formatted_before = opening == JournalOpening::Existing && marker.exists();
        let device = match self
            .open_journal_device(location, file_streams, formatted_before)
            .await?
        {
            Ok(device) => device,
            Err(damage) => return Ok(Err(damage)),
        };
        // The I/O profile's batch size where the device saturates, or the
        // default; at least what the largest message needs.
        let batch_bytes_min = config
            .io_settings
            .map_or(JOURNAL_BATCH_BYTES_MIN, |settings| {
                settings.journal_batch_bytes_max as usize
            });
        let batch_bytes_max = (shard.limits.max_payload_bytes + (128 << 10))
            .max(batch_bytes_min)
            .next_multiple_of(4096)
            .min(config.journal_segment_bytes as usize / 2);
        let journal_config = JournalConfig {
            shard: self.index as u32,
            batch_bytes_max,
            sync: config.sync,
            journal_id: config.journal_ids[self.index],
            formatted_before,
        };
        let (journal, report) = match Journal::open(device, journal_config, on_record).await {
            Ok(opened) => opened,
            Err(error) => return journal_refused(location, &marker, error).map(Err),
        };
        if !formatted_before {
            layout::record_formatted(&self.root, self.index, config.journal_ids[self.index])
                .map_err(RecoveryError::io(&marker))?;
        }
        self.log_journal_recovery(location, &report);
        Ok(Ok(Rc::new(journal)))
    }

    /// The journal's device: its segment files in a directory (checked for
    /// damage first), or its region of a raw device.
    async fn open_journal_device(
        &self,
        location: &JournalLocation,
        file_streams: usize,
        formatted_before: bool,
    ) -> Result<Result<DmaDevice, JournalDamage>, RecoveryError> {
        let config = &self.config;
        let sync = SyncMethod::for_policy(config.sync);
        let (segments, segment_bytes) = (config.journal_segments, config.journal_segment_bytes);
        let opened = match location {
            JournalLocation::Directory(directory) => {
                if (file_streams > 0 || formatted_before)
                    && !DmaDevice::directory_has_segments(directory, segments)
                {
                    let directory = directory.clone();
                    return Ok(Err(if file_streams > 0 {
                        JournalDamage::MissingWithStreams {
                            directory,
                            file_streams,
                        }
                    } else {
                        let marker = layout::formatted_marker(&self.root, self.index);
                        JournalDamage::MissingFormatted { directory, marker }
                    }));
                }
                if let Some(damage) =
                    DmaDevice::segment_files_damage(directory, segments, segment_bytes)
                {
                    return Ok(Err(JournalDamage::SegmentFiles(damage)));
                }
                DmaDevice::open_directory(directory, segments, segment_bytes, sync).await
            }
            JournalLocation::Region { device, offset, .. } => {
                let name = location.to_string();
                DmaDevice::open_region(device, *offset, segments, segment_bytes, sync, name).await
            }
        };
        opened
            .map(Ok)
            .map_err(|source| RecoveryError::JournalDevice {
                location: location.clone(),
                source,
            })
    }

    /// What recovering the journal repaired and cut, logged.
    fn log_journal_recovery(
        &self,
        location: &JournalLocation,
        report: &tern_storage::RecoveryReport,
    ) {
        for repair in &report.repairs {
            log::warn!(target: "tern::jetstream", "shard {}: journal {} damaged at offset {}: rebuilt ({:?}) from its redundant copy and written back", self.index, segment_file(location, &repair.file), repair.offset, repair.kind);
        }
        if let Some(cut) = &report.tail_cut {
            log::warn!(target: "tern::jetstream", "shard {}: journal {}: cut a torn write at offset {} ({}; a write that was never acknowledged)", self.index, segment_name(location, cut.segment), cut.offset, cut.reason);
        }
        log::info!(target: "tern::jetstream", "shard {}: journal {location} recovered: {} records in {} batches, sequences {}..={}", self.index, report.records, report.batches, report.first_sequence, report.last_sequence);
    }

    /// A new stream directory with its config and `raft` files, built
    /// under a hidden name and renamed into place whole (a stream
    /// directory without its config or raft file is then always damage).
    pub(super) async fn write_stream_directory(
        &self,
        config: &StreamConfig,
        created_unix_ns: u64,
        group: u64,
        peers: &[u64],
        raft: &persist::RaftState,
    ) -> Result<DmaFiles, StreamFilesError> {
        let directory = self.stream_directory(&config.name);
        let streams = self.root.join("streams");
        let building = streams.join(format!("{CREATING_PREFIX}{}", config.name));
        if building.exists() {
            std::fs::remove_dir_all(&building).map_err(StreamFilesError::io(&building))?;
        }
        {
            let files = DmaFiles::open(&building).await?;
            let stored = self.stored_config_json(group, &config.to_stored_json(), peers);
            persist::write_config(&files, stored.as_bytes(), created_unix_ns).await?;
            persist::write_raft(&files, raft).await?;
        }
        std::fs::rename(&building, &directory)
            .and_then(|()| std::fs::File::open(&streams)?.sync_all())
            .map_err(|source| StreamFilesError::Rename {
                path: directory.clone(),
                source,
            })?;
        Ok(DmaFiles::open(&directory).await?)
    }

    /// Rebuilds this node's replica of a replicated stream whose files are
    /// damaged (`reason`) from its peers: the damaged directory is moved
    /// aside (kept under `damaged/` for inspection), and the replica
    /// starts again empty, as a joining one, keeping its Raft term and
    /// vote; it neither votes nor stands for election until it holds
    /// again every entry it acknowledged (the leader sends it a snapshot
    /// and the log after it). docs/cluster-jetstream.md, "Repair from
    /// peers".
    pub(crate) async fn rebuild_from_peers(
        self: &Rc<Self>,
        rebuild: Rebuild,
        reason: &str,
    ) -> Result<Rc<StreamHandle>, StreamStartError> {
        let name = rebuild.config.name.clone();
        let directory = self.stream_directory(&name);
        let damaged = self.root.join("damaged");
        let kept = damaged.join(format!("{name}.{}", now_unix_ns()));
        std::fs::create_dir_all(&damaged)
            .and_then(|()| std::fs::rename(&directory, &kept))
            .and_then(|()| std::fs::File::open(self.root.join("streams"))?.sync_all())
            .and_then(|()| std::fs::File::open(&damaged)?.sync_all())
            .map_err(|source| StreamFilesError::MoveAside {
                path: directory.clone(),
                source,
            })?;
        log::warn!(target: "tern::jetstream", "stream {name}: {reason}; this replica rebuilds from its peers (the damaged files are kept in {})", kept.display());
        let mut term = rebuild.previous.term;
        let mut vote = rebuild.previous.vote;
        if let Some(journaled) = rebuild.hard_state.filter(|state| state.term >= term) {
            term = journaled.term;
            vote = journaled.vote.unwrap_or(0);
        }
        let raft = persist::RaftState {
            term,
            vote,
            ..persist::RaftState::created(1)
        };
        let files = self
            .write_stream_directory(
                &rebuild.config,
                rebuild.created_unix_ns,
                rebuild.group,
                &rebuild.peers,
                &raft,
            )
            .await?;
        let acknowledged_index = rebuild
            .acknowledged_index
            .max(rebuild.previous.applied_index);
        let recovered = Recovered {
            raft: Some(raft),
            hard_state: rebuild.hard_state,
            entries: Vec::new(),
            peers: rebuild.peers,
            acknowledged_index,
            joining: true,
            entries_lost_through_term: if rebuild.entries_lost { term } else { 0 },
        };
        let started = self
            .start_stream(
                rebuild.config,
                rebuild.created_unix_ns,
                rebuild.group,
                Some(files),
                recovered,
            )
            .await?;
        Ok(started)
    }
}

/// The journal could not be opened: damage (`Ok`: its file streams stay
/// offline), or a refusal (`Err`: the server does not start).
fn journal_refused(
    location: &JournalLocation,
    marker: &Path,
    error: JournalError,
) -> Result<JournalDamage, RecoveryError> {
    match error {
        JournalError::Corrupt {
            file,
            offset,
            reason,
            ..
        } => Ok(JournalDamage::Corrupt {
            file: segment_file(location, &file),
            offset,
            reason,
        }),
        JournalError::Read(source) => Ok(JournalDamage::Unreadable {
            location: location.clone(),
            source,
        }),
        JournalError::Erased { .. } => Ok(JournalDamage::Erased {
            location: location.clone(),
            marker: marker.to_path_buf(),
        }),
        source => Err(RecoveryError::Journal {
            location: location.clone(),
            source,
        }),
    }
}

/// A segment's name as the device gives it, made a full path for a
/// directory's files.
fn segment_file(location: &JournalLocation, file: &str) -> String {
    match location {
        JournalLocation::Directory(directory) => directory.join(file).display().to_string(),
        JournalLocation::Region { .. } => file.to_string(),
    }
}

/// Segment `segment` of the journal, as the operator finds it.
fn segment_name(location: &JournalLocation, segment: u32) -> String {
    match location {
        JournalLocation::Directory(_) => {
            segment_file(location, &tern_storage::dma::segment_file_name(segment))
        }
        JournalLocation::Region { .. } => format!("segment {segment} of {location}"),
    }
}
