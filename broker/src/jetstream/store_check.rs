//! `tern storage check` and `tern storage repair`: the operator's view of
//! a store's damage, and the explicit command that cuts at it.
//!
//! tern never discards data on its own: a damaged file keeps the streams
//! that depend on it offline (500 10194 `stream is offline: <reason>`).
//! [`check`] reads everything the server reads at start (the `layout`, each
//! stream's `config`, `raft` and `consumers` files and block store, each
//! shard's journal), changes nothing, and says for each damage what
//! [`repair`] would give up to bring it back. [`repair`] of one target (a
//! stream, a shard's journal, the layout) without `confirm` returns that
//! plan and changes nothing; with `confirm` it carries it out:
//!
//! - a stream: its block store's salvaged manifest stored in the `raft`
//!   file; a bad `consumers` file removed and its reference cleared; a
//!   missing or damaged `raft` file rebuilt from the block store files and
//!   the journal. A damaged `config` cannot be rebuilt (refused, with what
//!   to do instead).
//! - a journal: missing segment files recreated and resized ones brought
//!   back to full size (zeros), then `recovery::cut` where the readable log
//!   ends.
//! - the layout: rebuilt from the journals when they say it unambiguously,
//!   never over a valid one.
//!
//! What each repair does and discards: docs/storage-format.md, "Repairing
//! damaged storage". The I/O runs on a glommio executor of its own (the
//! journal and the block store are glommio code), with little io_memory:
//! locked memory may be capped at 8 MiB.

mod journal;
mod layout;
mod read_only;
pub mod report;
mod stream;

use std::future::Future;
use std::path::{Path, PathBuf};

use tern_storage::block_store::StoreError;
use tern_storage::{DeviceError, JournalError, SyncPolicy};

use crate::config::{Config, ConfigError, Flags};
use report::{Health, JournalSummary, Severity, StreamSummary};
pub use report::{RepairReport, StoreReport};

/// io_uring buffer memory of the check's executor: it reads little at a
/// time through registered buffers (larger reads use ordinary memory).
const IO_MEMORY_BYTES: usize = 512 << 10;

/// Where the store is and how its journals are shaped: what tern-server
/// would use (`store_dir`, `journal_dir`, `journal_segment_size`,
/// `journal_segments`, `sync`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckOptions {
    pub store_dir: PathBuf,
    pub journal_dir: PathBuf,
    pub journal_segment_bytes: u64,
    pub journal_segments: u32,
    pub sync: SyncPolicy,
    /// `journal_dir` is a raw block device (every shard's journal in its
    /// region).
    pub journal_device: bool,
}

impl CheckOptions {
    /// Resolved exactly as tern-server resolves them from the same flags
    /// and config file (`-c`): `store_dir` overrides the file's, and so
    /// does `journal_dir` when given.
    pub fn resolve(
        store_dir: PathBuf,
        config_file: Option<PathBuf>,
        journal_dir: Option<PathBuf>,
    ) -> Result<CheckOptions, CheckError> {
        let config = Config::resolve(Flags {
            store_dir: Some(store_dir),
            config: config_file,
            journal_dir,
            jetstream: true,
            ..Flags::default()
        })?;
        let jetstream = config.jetstream.expect("JetStream is enabled by the flags");
        let journal_device = super::journal_location::is_device(&jetstream.journal_dir);
        // glommio opens directories by absolute path only (as `server::run`).
        let absolute = |path: PathBuf| -> Result<PathBuf, CheckError> {
            if path.is_absolute() {
                return Ok(path);
            }
            let here = std::env::current_dir().map_err(io_error(Path::new(".")))?;
            Ok(here.join(path))
        };
        Ok(CheckOptions {
            store_dir: absolute(config.store_dir)?,
            journal_dir: absolute(jetstream.journal_dir)?,
            journal_segment_bytes: jetstream.journal_segment_bytes,
            journal_segments: jetstream.journal_segments,
            sync: jetstream.sync,
            journal_device,
        })
    }

    /// `path` as findings name it: relative to the store directory when
    /// inside it.
    fn relative(&self, path: &Path) -> String {
        path.strip_prefix(&self.store_dir)
            .unwrap_or(path)
            .display()
            .to_string()
    }

    fn jetstream_root(&self) -> PathBuf {
        self.store_dir.join("jetstream")
    }

    /// The command an operator runs to repair `target`.
    fn repair_command(&self, target: &RepairTarget) -> String {
        let target = match target {
            RepairTarget::Stream(name) => format!("--stream {name}"),
            RepairTarget::Journal(shard) => format!("--journal {shard}"),
            RepairTarget::Layout => "--layout".to_string(),
        };
        format!("tern storage repair {} {target}", self.store_dir.display())
    }
}

/// What one `repair` call repairs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RepairTarget {
    /// A stream's files (`raft`, `consumers`, block store).
    Stream(String),
    /// A shard's journal.
    Journal(usize),
    /// `jetstream/layout`.
    Layout,
}

impl RepairTarget {
    fn describe(&self) -> String {
        match self {
            RepairTarget::Stream(name) => format!("stream {name}"),
            RepairTarget::Journal(shard) => format!("journal of shard {shard}"),
            RepairTarget::Layout => "layout".to_string(),
        }
    }
}

/// Why a check or repair could not run at all (damage is reported, not an
/// error).
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Device(#[from] DeviceError),
    #[error("{0}")]
    JournalDevice(#[from] tern_storage::journal_device::JournalDeviceError),
    #[error("{0}")]
    Layout(#[from] super::layout::LayoutError),
    #[error("journal {directory}: {source}")]
    Journal {
        directory: String,
        source: JournalError,
    },
    #[error("{directory}: {source}")]
    Store {
        directory: String,
        source: StoreError,
    },
    #[error("{path}: {source}")]
    Persist {
        path: String,
        source: super::persist::PersistError,
    },
    #[error("cannot start an I/O executor: {0} (is locked memory, ulimit -l, below 1 MiB?)")]
    Executor(String),
    #[error("{store} has no stream {name} (no directory {directory})")]
    NoSuchStream {
        store: String,
        name: String,
        directory: String,
    },
    #[error("the store has no shard {shard}: its layout names {shard_count}")]
    NoSuchShard { shard: usize, shard_count: usize },
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> CheckError + '_ {
    move |source| CheckError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// Runs `work` on a glommio executor of this thread's own.
fn run<T>(work: impl Future<Output = Result<T, CheckError>>) -> Result<T, CheckError> {
    let executor = glommio::LocalExecutorBuilder::default()
        .io_memory(IO_MEMORY_BYTES)
        .make()
        .map_err(|error| CheckError::Executor(error.to_string()))?;
    executor.run(work)
}

/// Reads the whole store and reports what is damaged; creates, removes and
/// writes nothing.
pub fn check(options: &CheckOptions) -> Result<StoreReport, CheckError> {
    let options = options.clone();
    run(async move { check_store(&options).await })
}

/// Repairs `target`: without `confirm`, the plan only (nothing changes).
pub fn repair(
    options: &CheckOptions,
    target: &RepairTarget,
    confirm: bool,
) -> Result<RepairReport, CheckError> {
    let (options, target) = (options.clone(), target.clone());
    run(async move {
        match &target {
            RepairTarget::Layout => layout::repair(&options, confirm).await,
            RepairTarget::Journal(shard) => journal::repair(&options, *shard, confirm).await,
            RepairTarget::Stream(name) => stream::repair(&options, name, confirm).await,
        }
    })
}

async fn check_store(options: &CheckOptions) -> Result<StoreReport, CheckError> {
    let mut findings = Vec::new();
    let (mut streams, directory_findings) = stream::examine_all(options).await?;
    let groups: Vec<(String, Option<u64>)> = streams
        .iter()
        .map(|stream| (stream.name.clone(), stream.group()))
        .collect();
    let layout = layout::examine(options, &groups)?;
    findings.extend(layout.findings.iter().cloned());
    let shard_count = layout.effective.as_ref().map(|layout| layout.shard_count);
    for stream in &mut streams {
        stream.shard = shard_count.map(|count| super::owner_of(&stream.name, count));
    }
    let mut journals = Vec::new();
    if let Some(effective) = &layout.effective {
        for shard in 0..effective.shard_count {
            let owned = stream::groups_of_shard(&streams, shard);
            let examined = journal::examine(
                options,
                shard,
                Some(effective.journal_ids[shard]),
                &owned,
                stream::file_streams_of_shard(&streams, shard),
            )
            .await?;
            journals.push(examined);
        }
    }
    if let Some(shard_count) = shard_count {
        findings.extend(journal::unused_directories(options, shard_count));
    }
    let mut stream_summaries = Vec::new();
    for stream in &streams {
        let journal = stream.shard.and_then(|shard| journals.get(shard));
        let stream_findings = stream.findings(options, journal);
        let damaged = stream_findings
            .iter()
            .any(|finding| finding.severity == Severity::Damage);
        stream_summaries.push(StreamSummary {
            name: stream.name.clone(),
            shard: stream.shard,
            health: if damaged { Health::Damaged } else { Health::Ok },
        });
        findings.extend(stream_findings);
    }
    findings.extend(directory_findings);
    let root = options.jetstream_root();
    match super::identity::examine(&root) {
        Ok(None) => {}
        Ok(Some(identity)) => findings.push(report::Finding::new(
            Severity::Ok,
            options.relative(&root.join(super::identity::FILE)),
            format!("this cluster node's Raft identity: {} is {:016x}", identity.name, identity.id),
        )),
        Err(reason) => findings.push(report::Finding::new(
            Severity::Damage,
            options.relative(&root.join(super::identity::FILE)),
            format!(
                "{reason}: the node's Raft identity; the server refuses to start. Restore the file, or remove the store's JetStream data so the node joins its cluster as a new one"
            ),
        )),
    }
    let mut journal_summaries = Vec::new();
    for journal in &journals {
        journal_summaries.push(JournalSummary {
            shard: journal.shard,
            directory: options.relative(&journal.directory),
            health: journal.health(),
            records: journal.records,
        });
        findings.extend(journal.findings.iter().cloned());
    }
    Ok(StoreReport {
        store_dir: options.store_dir.display().to_string(),
        journal_dir: options.journal_dir.display().to_string(),
        layout: layout.status,
        shard_count,
        journals: journal_summaries,
        streams: stream_summaries,
        findings,
    })
}

#[cfg(test)]
mod tests;
