//! One stream's files, checked and repaired: `config` (cannot be rebuilt),
//! `raft` (rebuilt from the block store files and the journal), the
//! `consumers` file against the `raft` file's reference (a bad one is
//! removed and its reference cleared), and the block store against the
//! `raft` file's manifest (salvaged: the largest manifest that opens).
//!
//! A rebuilt `raft` file's manifest is what the block store files alone
//! hold: every segment file present (per first sequence, the version whose
//! verified records reach furthest), the verified prefix of each, in
//! order and not overlapping; the newest deletes log's verified entries;
//! floor 1 and last sequence the highest record's. Its applied index is
//! the lowest index of the stream's entries still in the journal minus
//! one (so everything the journal holds is replayed, which is idempotent),
//! else the consumers file's applied index, else 0.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tern_storage::block_store::manifest::{
    digest_append, parse_deletes_file_name, parse_segment_file_name, DELETE_ENTRY_BYTES,
    DIGEST_EMPTY,
};
use tern_storage::block_store::record::{self, DecodeError};
use tern_storage::block_store::stream::SEGMENT_SEQUENCES_MAX;
use tern_storage::block_store::{
    salvage, DeletesExtent, DmaFiles, Loss, Manifest, Salvage, SegmentExtent, StoreFiles,
};
use tern_storage::format::checksum;

use super::journal::{GroupRecords, JournalExamination, JournalState, StreamOfGroup};
use super::read_only::ReadOnlyFiles;
use super::report::{Action, Discard, Finding, Health, RepairReport, Severity};
use super::{io_error, CheckError, CheckOptions, RepairTarget};
use crate::jetstream::consumer::config::ConsumerConfig;
use crate::jetstream::consumer::delivery::DeliveryState;
use crate::jetstream::consumer::store::{self as consumer_store, StoredConsumers, CONSUMERS_FILE};
use crate::jetstream::consumer::ConsumerSpec;
use crate::jetstream::persist::{self, ConsumersReference, RaftState, CONFIG_FILE, RAFT_FILE};
use crate::jetstream::stream::config::StreamConfig;
use crate::jetstream::CREATING_PREFIX;

/// Larger than any `config`, `raft` or `consumers` file tern writes: a
/// bigger one is damage, not read into memory.
const SMALL_FILE_BYTES_MAX: u64 = 1 << 30;
/// A block store segment holds at most this much (record offsets are
/// 32-bit); a rebuild reads no more of a file.
const SEGMENT_FILE_BYTES_MAX: u64 = u32::MAX as u64;
const DELETE_MAGIC: u32 = 0x4445_4c31;

/// One of a stream's files as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Part<T> {
    Present(T),
    Missing,
    Damaged(String),
}

/// What the block store holds against the `raft` file's manifest.
pub(super) enum StoreCheck {
    Salvaged(Salvage),
    /// An I/O error: nothing can be said (or repaired).
    Unreadable(String),
}

/// A manifest built from the block store files alone (for a lost `raft`
/// file), and what it gives up.
#[derive(Debug, Clone)]
pub(super) struct ManifestRebuild {
    pub manifest: Manifest,
    /// Newest record time (stream info's `last_ts`).
    pub last_unix_ns: u64,
    pub discards: Vec<Discard>,
}

pub(super) struct StreamExamination {
    pub name: String,
    pub directory: PathBuf,
    /// Its owner, once the shard count is known.
    pub shard: Option<usize>,
    pub config: Part<(u64, StreamConfig)>,
    pub raft: Part<RaftState>,
    pub consumers: Part<(StoredConsumers, u32)>,
    /// The durables' names, when the consumers file decodes.
    pub consumer_names: Option<Vec<String>>,
    /// Why the consumers file keeps the stream offline, if it does.
    pub consumers_damage: Option<String>,
    /// With a readable `raft` file.
    pub store: Option<StoreCheck>,
    /// Store files the `raft` file's manifest does not name.
    pub leftovers: Vec<String>,
    /// Without a readable `raft` file: what a rebuild would store.
    pub rebuilt: Option<ManifestRebuild>,
    /// The block store's directory: the `raft` file's generation, or
    /// without one the newest present.
    pub messages: PathBuf,
    pub generation: u64,
}

impl StreamExamination {
    pub(super) fn group(&self) -> Option<u64> {
        match &self.config {
            Part::Present((group, _)) => Some(*group),
            _ => None,
        }
    }

    fn file(&self, options: &CheckOptions, name: &str) -> String {
        options.relative(&self.directory.join(name))
    }

    /// One finding per damage (or one `ok` line), in file order.
    pub(super) fn findings(
        &self,
        options: &CheckOptions,
        journal: Option<&JournalExamination>,
    ) -> Vec<Finding> {
        let command = options.repair_command(&RepairTarget::Stream(self.name.clone()));
        let mut findings = Vec::new();
        let config_reason = match &self.config {
            Part::Present(_) => None,
            Part::Missing => Some("missing".to_string()),
            Part::Damaged(reason) => Some(reason.clone()),
        };
        if let Some(reason) = config_reason {
            findings.push(Finding::new(
                Severity::Damage,
                self.file(options, CONFIG_FILE),
                format!("{reason}; {}", config_advice(&self.name)),
            ));
        }
        let raft_reason = match &self.raft {
            Part::Present(_) => None,
            Part::Missing => Some("missing (written when the stream was created)".to_string()),
            Part::Damaged(reason) => Some(reason.clone()),
        };
        if let Some(reason) = raft_reason {
            let mut reason = format!(
                "{reason}; rebuilt by the repair from the block store files and the journal"
            );
            if let Some(journal) = journal.filter(|journal| !journal_usable(journal)) {
                reason.push_str(&format!(
                    " (which needs the journal of shard {} repaired first)",
                    journal.shard
                ));
            }
            let discards = self
                .rebuilt
                .as_ref()
                .map(|rebuilt| rebuilt.discards.clone())
                .unwrap_or_default();
            findings.push(
                Finding::new(Severity::Damage, self.file(options, RAFT_FILE), reason)
                    .discarding(discards)
                    .repaired_by(command.clone()),
            );
        }
        if let Some(reason) = &self.consumers_damage {
            findings.push(
                Finding::new(
                    Severity::Damage,
                    self.file(options, CONSUMERS_FILE),
                    reason.clone(),
                )
                .discarding(vec![Discard::Consumers {
                    stream: self.name.clone(),
                    names: self.consumer_names.clone(),
                }])
                .repaired_by(command.clone()),
            );
        }
        let messages = self.messages.clone();
        match &self.store {
            Some(StoreCheck::Salvaged(salvage)) => {
                for loss in &salvage.losses {
                    findings.push(
                        self.loss_finding(options, &messages, loss)
                            .repaired_by(command.clone()),
                    );
                }
            }
            Some(StoreCheck::Unreadable(reason)) => findings.push(Finding::new(
                Severity::Damage,
                options.relative(&messages),
                format!("cannot be read: {reason}"),
            )),
            None => {}
        }
        if !self.leftovers.is_empty() {
            findings.push(Finding::new(
                Severity::SelfHealing,
                options.relative(&messages),
                format!(
                    "{} file(s) the checkpoint does not name ({}): removed when the stream opens (what they hold is replayed from the journal)",
                    self.leftovers.len(),
                    self.leftovers.join(", ")
                ),
            ));
        }
        if let Some(journal) = journal.filter(|journal| journal.health() == Health::Damaged) {
            findings.push(Finding::new(
                Severity::Note,
                options.relative(&self.directory),
                format!(
                    "offline until the journal of shard {} is repaired (see its line)",
                    journal.shard
                ),
            ));
        }
        if findings
            .iter()
            .all(|finding| finding.severity != Severity::Damage)
        {
            findings.insert(
                0,
                Finding::new(
                    Severity::Ok,
                    options.relative(&self.directory),
                    self.summary(),
                ),
            );
        }
        findings
    }

    fn summary(&self) -> String {
        let mut parts = Vec::new();
        if let Some(shard) = self.shard {
            parts.push(format!("shard {shard}"));
        }
        if let Part::Present(raft) = &self.raft {
            let manifest = &raft.manifest;
            let records: u64 = manifest
                .segments
                .iter()
                .map(|segment| segment.records)
                .sum();
            parts.push(format!(
                "{records} records in {} segment(s), sequences {}..={}, applied index {}",
                manifest.segments.len(),
                manifest.floor,
                manifest.last_sequence,
                raft.applied_index
            ));
        }
        if let Some(names) = self
            .consumer_names
            .as_ref()
            .filter(|names| !names.is_empty())
        {
            parts.push(format!("durable consumers {}", names.join(", ")));
        }
        format!("intact: {}", parts.join(", "))
    }

    fn loss_finding(&self, options: &CheckOptions, messages: &Path, loss: &Loss) -> Finding {
        match loss {
            Loss::Messages {
                file,
                offset,
                records,
                first_sequence,
                last_sequence,
                reason,
            } => Finding::new(
                Severity::Damage,
                options.relative(&messages.join(file)),
                reason.clone(),
            )
            .at(*offset)
            .discarding(vec![Discard::Messages {
                stream: self.name.clone(),
                first_sequence: *first_sequence,
                last_sequence: *last_sequence,
                messages: *records,
                note: None,
            }]),
            Loss::Deletes {
                file,
                offset,
                entries,
                reason,
            } => Finding::new(
                Severity::Damage,
                options.relative(&messages.join(file)),
                reason.clone(),
            )
            .at(*offset)
            .discarding(vec![Discard::Deletes {
                stream: self.name.clone(),
                file: file.clone(),
                entries: *entries,
            }]),
        }
    }
}

/// What to do about a `config` that cannot be read.
fn config_advice(name: &str) -> String {
    format!(
        "a stream's config cannot be rebuilt: restore the file from a backup, or delete the stream with $JS.API.STREAM.DELETE.{name} (which works on an offline stream)"
    )
}

fn journal_usable(journal: &JournalExamination) -> bool {
    matches!(journal.state, JournalState::Intact | JournalState::Absent)
}

/// The block store settings the server opens file streams with, as far
/// as verification is concerned.
pub(super) fn block_store_config() -> tern_storage::block_store::StreamConfig {
    tern_storage::block_store::StreamConfig {
        sync: false,
        tail_cache_bytes: 0,
        ..tern_storage::block_store::StreamConfig::default()
    }
}

/// A small file's bytes: `Missing`, or `Damaged` when it is larger than
/// any such file tern writes.
fn read_small(path: &Path) -> Result<Part<Vec<u8>>, CheckError> {
    match std::fs::metadata(path) {
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(Part::Missing),
        Err(error) => Err(io_error(path)(error)),
        Ok(meta) if meta.len() > SMALL_FILE_BYTES_MAX => Ok(Part::Damaged(format!(
            "{} bytes, larger than any such file tern writes",
            meta.len()
        ))),
        Ok(_) => std::fs::read(path)
            .map(Part::Present)
            .map_err(io_error(path)),
    }
}

/// Reads and decodes one of the stream's files.
fn read_part<T>(path: &Path, decode: impl FnOnce(&[u8]) -> Part<T>) -> Result<Part<T>, CheckError> {
    Ok(match read_small(path)? {
        Part::Present(bytes) => decode(&bytes),
        Part::Missing => Part::Missing,
        Part::Damaged(reason) => Part::Damaged(reason),
    })
}

/// Every stream directory of the store, examined; plus findings about the
/// streams directory itself (unfinished creations, the trash).
pub(super) async fn examine_all(
    options: &CheckOptions,
) -> Result<(Vec<StreamExamination>, Vec<Finding>), CheckError> {
    let root = options.jetstream_root();
    let streams = root.join("streams");
    let mut findings = Vec::new();
    let mut names: Vec<String> = match std::fs::read_dir(&streams) {
        Ok(entries) => entries
            .filter_map(|entry| entry.ok())
            .filter(|entry| entry.path().is_dir())
            .filter_map(|entry| entry.file_name().into_string().ok())
            .collect(),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(error) => return Err(io_error(&streams)(error)),
    };
    names.sort();
    for name in &names {
        if let Some(stream) = name.strip_prefix(CREATING_PREFIX) {
            findings.push(Finding::new(
                Severity::SelfHealing,
                options.relative(&streams.join(name)),
                format!("the creation of stream {stream} never completed (it was never answered): removed at the next start"),
            ));
        }
    }
    let trash = root.join("trash");
    if std::fs::read_dir(&trash).is_ok_and(|mut entries| entries.next().is_some()) {
        findings.push(Finding::new(
            Severity::SelfHealing,
            options.relative(&trash),
            "stream directories being deleted: emptied at the next start",
        ));
    }
    let mut examined = Vec::new();
    for name in names.into_iter().filter(|name| !name.starts_with('.')) {
        let directory = streams.join(&name);
        examined.push(examine(name, directory).await?);
    }
    Ok((examined, findings))
}

async fn examine(name: String, directory: PathBuf) -> Result<StreamExamination, CheckError> {
    let config = read_part(
        &directory.join(CONFIG_FILE),
        |bytes| match persist::decode_config(bytes) {
            Ok((json, _)) => match crate::jetstream::decode_stored_config(&json) {
                Ok(decoded) => Part::Present(decoded),
                Err(error) => Part::Damaged(error.to_string()),
            },
            Err(error) => Part::Damaged(error.to_string()),
        },
    )?;
    let raft = read_part(
        &directory.join(RAFT_FILE),
        |bytes| match persist::decode_raft(bytes) {
            Ok(raft) => Part::Present(raft),
            Err(error) => Part::Damaged(error.to_string()),
        },
    )?;
    let mut consumer_names = None;
    let consumers = read_part(&directory.join(CONSUMERS_FILE), |bytes| {
        let stored = match consumer_store::decode(bytes) {
            Ok(stored) => stored,
            Err(error) => return Part::Damaged(error.to_string()),
        };
        consumer_names = Some(stored.consumers.iter().map(|c| c.name.clone()).collect());
        match consumer_failure(&stored) {
            Some(reason) => Part::Damaged(reason),
            None => Part::Present((stored, consumer_store::file_checksum(bytes))),
        }
    })?;
    let consumers_damage = consumers_damage(&consumers, &raft);
    let generation = match &raft {
        Part::Present(raft) => raft.generation,
        // A snapshot's staged directory may be the newest after a crash
        // mid-install; a rebuild then reads what it holds (the journal has
        // the rest).
        _ => newest_messages_generation(&directory),
    };
    let messages = directory.join(persist::messages_directory(generation));
    let files = ReadOnlyFiles::new(&messages);
    let (store, leftovers, rebuilt) = match &raft {
        Part::Present(raft) => {
            let store = match salvage(&files, &block_store_config(), &raft.manifest).await {
                Ok(salvage) => StoreCheck::Salvaged(salvage),
                Err(error) => StoreCheck::Unreadable(error.to_string()),
            };
            (Some(store), leftovers(&files.names(), &raft.manifest), None)
        }
        _ => (
            None,
            Vec::new(),
            Some(rebuild_manifest(&name, &messages).await?),
        ),
    };
    Ok(StreamExamination {
        name,
        directory,
        shard: None,
        config,
        raft,
        consumers,
        consumer_names,
        consumers_damage,
        store,
        leftovers,
        rebuilt,
        messages,
        generation,
    })
}

/// The highest generation of the `messages` directories in a stream
/// directory (0 when there is none).
fn newest_messages_generation(directory: &Path) -> u64 {
    std::fs::read_dir(directory)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| persist::messages_generation(entry.file_name().to_str()?))
        .max()
        .unwrap_or(0)
}

/// Why the stream's open would refuse one of the durables (its config or
/// its delivery state does not decode, as `load_consumers` checks), if it
/// would.
fn consumer_failure(stored: &StoredConsumers) -> Option<String> {
    stored.consumers.iter().find_map(|consumer| {
        let config = match ConsumerConfig::from_stored_json(&consumer.json) {
            Ok(config) => config,
            Err(reason) => return Some(format!("consumer {}: {reason}", consumer.name)),
        };
        let spec = match ConsumerSpec::from_config(&config) {
            Ok(spec) => spec,
            Err(error) => {
                return Some(format!("consumer {}: {}", consumer.name, error.description))
            }
        };
        DeliveryState::decode(spec.delivery, &consumer.state)
            .err()
            .map(|error| format!("consumer {}: {error}", consumer.name))
    })
}

/// Why the stream would refuse its consumers file (as `load_consumers`
/// decides), if it would.
fn consumers_damage(
    consumers: &Part<(StoredConsumers, u32)>,
    raft: &Part<RaftState>,
) -> Option<String> {
    let Part::Present(raft) = raft else {
        return match consumers {
            Part::Damaged(reason) => Some(reason.clone()),
            _ => None,
        };
    };
    match (consumers, raft.consumers) {
        (Part::Missing, None) => None,
        (Part::Missing, Some(expected)) => Some(format!(
            "missing (the checkpoint at index {} recorded it, with the durable consumers as of index {})",
            raft.applied_index, expected.applied_index
        )),
        (Part::Damaged(reason), _) => Some(reason.clone()),
        // Written before the raft file of a checkpoint that did not finish.
        (Part::Present((stored, _)), _) if stored.applied_index > raft.applied_index => None,
        (Part::Present((stored, checksum)), Some(expected))
            if stored.applied_index == expected.applied_index && *checksum == expected.checksum =>
        {
            None
        }
        (Part::Present((stored, checksum)), expected) => Some(format!(
            "not the one the checkpoint recorded (it holds index {} with checksum {checksum:#x}; the checkpoint at index {} expects {})",
            stored.applied_index,
            raft.applied_index,
            match expected {
                Some(expected) => format!(
                    "index {} with checksum {:#x}",
                    expected.applied_index, expected.checksum
                ),
                None => "no consumers file".into(),
            }
        )),
    }
}

/// Store files (as `StreamLog::open` counts them) the manifest does not name.
fn leftovers(names: &[String], manifest: &Manifest) -> Vec<String> {
    let named: Vec<String> = manifest
        .segments
        .iter()
        .map(SegmentExtent::file_name)
        .chain([manifest.deletes.file_name()])
        .collect();
    names
        .iter()
        .filter(|name| {
            parse_segment_file_name(name).is_some()
                || parse_deletes_file_name(name).is_some()
                || *name == "meta"
                || name.ends_with(".compact")
                || name.ends_with(".tmp")
        })
        .filter(|name| !named.contains(name))
        .cloned()
        .collect()
}

/// The verified records at the start of one segment file.
struct Prefix {
    extent: SegmentExtent,
    last_unix_ns: u64,
    /// Where a record that is not zeros failed to verify.
    damaged_at: Option<u64>,
    /// Sequences of the records that verify after that point (lost).
    after_damage: Vec<u64>,
}

/// The records from offset 0 of a segment image that verify, ascend and
/// lie in the segment's span and below `below`.
fn verified_prefix(image: &[u8], first_sequence: u64, version: u32, below: u64) -> Prefix {
    let span_end = first_sequence
        .saturating_add(SEGMENT_SEQUENCES_MAX)
        .min(below);
    let mut prefix = Prefix {
        extent: SegmentExtent {
            first_sequence,
            version,
            bytes: 0,
            records: 0,
            last_record_sequence: 0,
            digest: DIGEST_EMPTY,
        },
        last_unix_ns: 0,
        damaged_at: None,
        after_damage: Vec::new(),
    };
    let fits = |view: &record::StoredView<'_>, after: u64| {
        view.sequence >= first_sequence && view.sequence < span_end && view.sequence > after
    };
    let mut position = 0;
    while position < image.len() {
        match record::decode(&image[position..]) {
            Ok(view) if fits(&view, prefix.extent.last_record_sequence) => {
                let extent = &mut prefix.extent;
                extent.records += 1;
                extent.last_record_sequence = view.sequence;
                extent.digest = digest_append(extent.digest, view.checksum);
                prefix.last_unix_ns = prefix.last_unix_ns.max(view.timestamp_ns);
                position += view.stored_bytes;
                extent.bytes = position as u64;
            }
            // The next segment's sequences: the end of this one's, not damage.
            Ok(view) if view.sequence >= below => break,
            Err(DecodeError::Empty) => break,
            _ => {
                prefix.damaged_at = Some(position as u64);
                break;
            }
        }
    }
    if let Some(damaged_at) = prefix.damaged_at {
        // Records are 8-byte aligned: look at every aligned offset after
        // the damage for the ones it cuts off.
        let mut last = prefix.extent.last_record_sequence;
        let mut at = damaged_at as usize + record::RECORD_ALIGN_BYTES;
        while at + record::RECORD_HEADER_BYTES <= image.len() {
            match record::decode(&image[at..]) {
                Ok(view) if fits(&view, last) => {
                    prefix.after_damage.push(view.sequence);
                    last = view.sequence;
                    at += view.stored_bytes;
                }
                _ => at += record::RECORD_ALIGN_BYTES,
            }
        }
    }
    prefix
}

/// A segment file's contents, at most what a segment can hold.
fn read_segment(path: &Path) -> Result<Vec<u8>, CheckError> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(io_error(path))?;
    let mut image = Vec::new();
    file.take(SEGMENT_FILE_BYTES_MAX)
        .read_to_end(&mut image)
        .map_err(io_error(path))?;
    Ok(image)
}

/// A candidate segment: its file and what of it verifies.
struct Candidate {
    name: String,
    prefix: Prefix,
}

/// The manifest the block store files in `directory` hold on their own.
pub(super) async fn rebuild_manifest(
    stream: &str,
    directory: &Path,
) -> Result<ManifestRebuild, CheckError> {
    let files = ReadOnlyFiles::new(directory);
    let names = files.names();
    let mut discards = Vec::new();
    let mut by_first: BTreeMap<u64, Vec<Candidate>> = BTreeMap::new();
    for name in &names {
        let Some((first, version)) = parse_segment_file_name(name) else {
            continue;
        };
        let image = read_segment(&directory.join(name))?;
        let prefix = verified_prefix(&image, first, version, u64::MAX);
        by_first.entry(first).or_default().push(Candidate {
            name: name.clone(),
            prefix,
        });
    }
    // Per first sequence, the version whose records reach furthest (a
    // compaction's output is the old version minus deleted records, and
    // may be unfinished); on a tie the newer one (fewer deleted records).
    let mut chosen: Vec<Candidate> = Vec::new();
    for (_, mut candidates) in by_first {
        candidates.sort_by_key(|candidate| {
            (
                candidate.prefix.extent.records > 0,
                candidate.prefix.extent.last_record_sequence,
                candidate.prefix.extent.version,
            )
        });
        let best = candidates.pop().expect("at least one");
        for unused in candidates {
            discards.push(Discard::Other {
                text: format!(
                    "{} (another version of {}: not used, removed when the stream opens)",
                    unused.name, best.name
                ),
            });
        }
        if best.prefix.extent.records == 0 {
            discards.push(Discard::Other {
                text: format!("{} (no record verifies: not used)", best.name),
            });
            continue;
        }
        chosen.push(best);
    }
    // Not overlapping: a segment ends below the next one's first sequence.
    for index in 0..chosen.len().saturating_sub(1) {
        let next_first = chosen[index + 1].prefix.extent.first_sequence;
        if chosen[index].prefix.extent.last_record_sequence >= next_first {
            let candidate = &chosen[index];
            let image = read_segment(&directory.join(&candidate.name))?;
            let extent = candidate.prefix.extent;
            discards.push(Discard::Other {
                text: format!(
                    "the records of {} from sequence {next_first} on (they overlap the next segment)",
                    candidate.name
                ),
            });
            chosen[index].prefix =
                verified_prefix(&image, extent.first_sequence, extent.version, next_first);
        }
    }
    chosen.retain(|candidate| candidate.prefix.extent.records > 0);
    for candidate in &chosen {
        let prefix = &candidate.prefix;
        let Some(damaged_at) = prefix.damaged_at else {
            continue;
        };
        let lost = prefix.after_damage.len() as u64;
        match (prefix.after_damage.first(), prefix.after_damage.last()) {
            (Some(&first), Some(&last)) => discards.push(Discard::Messages {
                stream: stream.to_string(),
                first_sequence: first,
                last_sequence: last,
                messages: lost,
                note: Some(format!(
                    "after damage at offset {damaged_at} of {}",
                    candidate.name
                )),
            }),
            _ => discards.push(Discard::Other {
                text: format!(
                    "whatever {} holds from offset {damaged_at} (it does not verify)",
                    candidate.name
                ),
            }),
        }
    }
    let last_sequence = chosen
        .iter()
        .map(|candidate| candidate.prefix.extent.last_record_sequence)
        .max()
        .unwrap_or(0);
    let last_unix_ns = chosen
        .iter()
        .map(|candidate| candidate.prefix.last_unix_ns)
        .max()
        .unwrap_or(0);
    let deletes = rebuild_deletes(directory, &names, last_sequence, &mut discards)?;
    let manifest = Manifest {
        floor: 1,
        last_sequence,
        segments: chosen
            .iter()
            .map(|candidate| candidate.prefix.extent)
            .collect(),
        deletes,
    };
    manifest.check().map_err(|error| CheckError::Store {
        directory: directory.display().to_string(),
        source: error.into(),
    })?;
    if !manifest.segments.is_empty() {
        discards.push(Discard::Other {
            text: format!(
                "the purge floor (unknown without the raft file): messages of stream {stream} purged or expired but still in these segments come back"
            ),
        });
    }
    // Open's own checks, as a guard: what this manifest names must open.
    let checked = salvage(&files, &block_store_config(), &manifest)
        .await
        .map_err(|source| CheckError::Store {
            directory: directory.display().to_string(),
            source,
        })?;
    assert!(
        checked.losses.is_empty(),
        "a rebuilt manifest names only verified records: {:?}",
        checked.losses
    );
    Ok(ManifestRebuild {
        manifest,
        last_unix_ns,
        discards,
    })
}

/// The newest deletes log's verified entries (each naming a sequence at
/// most `last_sequence`), up to the first that does not verify.
fn rebuild_deletes(
    directory: &Path,
    names: &[String],
    last_sequence: u64,
    discards: &mut Vec<Discard>,
) -> Result<DeletesExtent, CheckError> {
    let mut versions: Vec<u32> = names
        .iter()
        .filter_map(|name| parse_deletes_file_name(name))
        .collect();
    versions.sort_unstable();
    let Some(version) = versions.pop() else {
        return Ok(DeletesExtent::default());
    };
    let extent = DeletesExtent {
        version,
        entries: 0,
    };
    for older in versions {
        let older = DeletesExtent {
            version: older,
            entries: 0,
        };
        discards.push(Discard::Other {
            text: format!(
                "{} (an older deletes log: not used, removed when the stream opens)",
                older.file_name()
            ),
        });
    }
    let name = extent.file_name();
    let path = directory.join(&name);
    let bytes = read_segment(&path)?;
    let mut entries = 0;
    for entry in bytes.chunks_exact(DELETE_ENTRY_BYTES) {
        let sequence = u64::from_le_bytes(entry[0..8].try_into().expect("8 bytes"));
        let sum = u32::from_le_bytes(entry[8..12].try_into().expect("4 bytes"));
        let magic = u32::from_le_bytes(entry[12..16].try_into().expect("4 bytes"));
        let valid = sum == checksum(&entry[0..8])
            && magic == DELETE_MAGIC
            && (1..=last_sequence).contains(&sequence);
        if !valid {
            if entry.iter().any(|&byte| byte != 0) {
                discards.push(Discard::Other {
                    text: format!(
                        "the delete entries of {name} from offset {} (the first does not verify or names a sequence past {last_sequence}): the messages they deleted are served again",
                        entries * DELETE_ENTRY_BYTES as u64
                    ),
                });
            }
            break;
        }
        entries += 1;
    }
    Ok(DeletesExtent { entries, ..extent })
}

/// The applied index of a rebuilt `raft` file: everything the journal
/// still holds of the stream is replayed (idempotent), so the index just
/// below its lowest entry there; without any, the consumers file's (every
/// entry up to it was applied), else 0.
pub(super) fn rebuilt_applied_index(
    journal_lowest_index: Option<u64>,
    consumers_applied_index: Option<u64>,
) -> u64 {
    match (journal_lowest_index, consumers_applied_index) {
        (Some(lowest), _) => {
            assert!(lowest >= 1, "Raft indexes start at 1");
            lowest - 1
        }
        (None, Some(applied)) => applied,
        (None, None) => 0,
    }
}

/// The `raft` file a rebuild writes.
fn rebuilt_raft(
    rebuilt: &ManifestRebuild,
    journal: Option<&GroupRecords>,
    consumers: Option<&(StoredConsumers, u32)>,
    generation: u64,
) -> RaftState {
    let lowest = journal.and_then(|records| records.lowest_index);
    RaftState {
        term: journal.map_or(0, |records| records.highest_term),
        vote: 0,
        applied_index: rebuilt_applied_index(
            lowest.map(|(index, _)| index),
            consumers.map(|(stored, _)| stored.applied_index),
        ),
        // The entry at the applied index is gone; the one after it has a
        // term at least as high, so its term bounds it.
        applied_term: lowest.map_or(0, |(_, term)| term),
        last_unix_ns: rebuilt.last_unix_ns,
        consumers: consumers.map(|(stored, checksum)| ConsumersReference {
            applied_index: stored.applied_index,
            checksum: *checksum,
        }),
        manifest: rebuilt.manifest.clone(),
        generation,
    }
}

/// The streams of `shard` by Raft group (readable configs only).
pub(super) fn groups_of_shard(
    streams: &[StreamExamination],
    shard: usize,
) -> BTreeMap<u64, StreamOfGroup> {
    streams
        .iter()
        .filter(|stream| stream.shard == Some(shard))
        .filter_map(|stream| {
            let group = stream.group()?;
            let (applied_index, last_sequence) = match &stream.raft {
                Part::Present(raft) => (Some(raft.applied_index), raft.manifest.last_sequence),
                _ => (None, 0),
            };
            Some((
                group,
                StreamOfGroup {
                    name: stream.name.clone(),
                    applied_index,
                    last_sequence,
                },
            ))
        })
        .collect()
}

/// File streams of `shard` (every stream directory is a file stream) whose
/// config the server can read.
pub(super) fn file_streams_of_shard(streams: &[StreamExamination], shard: usize) -> usize {
    streams
        .iter()
        .filter(|stream| stream.shard == Some(shard) && stream.group().is_some())
        .count()
}

/// A stream repair's decision.
enum Planned {
    Changes(StreamPlan),
    /// Why it cannot be repaired (nothing is changed).
    Refused(String),
}

/// What a stream repair changes.
struct StreamPlan {
    actions: Vec<Action>,
    raft: Option<RaftState>,
    remove_consumers: bool,
    notes: Vec<String>,
}

/// `tern storage repair --stream <name>`.
pub(super) async fn repair(
    options: &CheckOptions,
    name: &str,
    confirm: bool,
) -> Result<RepairReport, CheckError> {
    let target = RepairTarget::Stream(name.to_string()).describe();
    let (mut streams, _) = examine_all(options).await?;
    let Some(position) = streams.iter().position(|stream| stream.name == name) else {
        return Err(CheckError::NoSuchStream {
            store: options.store_dir.display().to_string(),
            name: name.to_string(),
            directory: options
                .jetstream_root()
                .join("streams")
                .join(name)
                .display()
                .to_string(),
        });
    };
    if !matches!(streams[position].config, Part::Present(_)) {
        return Ok(RepairReport::refused(target, config_advice(name)));
    }
    let planned = match streams[position].raft {
        Part::Present(_) => plan_with_raft(options, &streams[position]),
        Part::Missing | Part::Damaged(_) => {
            plan_raft_rebuild(options, &mut streams, position).await?
        }
    };
    let plan = match planned {
        Planned::Changes(plan) => plan,
        Planned::Refused(refusal) => return Ok(RepairReport::refused(target, refusal)),
    };
    let mut report = RepairReport::plan(target, plan.actions, plan.notes);
    if !confirm || report.actions.is_empty() {
        return Ok(report);
    }
    let stream = &streams[position];
    let files = DmaFiles::open(&stream.directory).await?;
    if plan.remove_consumers {
        files.remove(CONSUMERS_FILE).await?;
        files.sync_directory().await?;
    }
    if let Some(raft) = &plan.raft {
        persist::write_raft(&files, raft)
            .await
            .map_err(|source| CheckError::Persist {
                path: stream.directory.join(RAFT_FILE).display().to_string(),
                source,
            })?;
    }
    report.applied = true;
    Ok(report)
}

/// Whether the stream's consumers file exists (to be removed).
fn consumers_present(stream: &StreamExamination) -> bool {
    !matches!(stream.consumers, Part::Missing)
}

/// A readable `raft` file: store the salvaged manifest, drop a bad
/// consumers file.
fn plan_with_raft(options: &CheckOptions, stream: &StreamExamination) -> Planned {
    let Part::Present(raft) = &stream.raft else {
        unreachable!("called with a readable raft file")
    };
    let mut new_raft = raft.clone();
    let mut actions = Vec::new();
    let mut changed = false;
    match &stream.store {
        Some(StoreCheck::Unreadable(reason)) => {
            return Planned::Refused(format!(
                "{}: cannot be read: {reason}",
                options.relative(&stream.messages)
            ))
        }
        Some(StoreCheck::Salvaged(salvaged)) if !salvaged.losses.is_empty() => {
            let discards = salvaged
                .losses
                .iter()
                .map(|loss| stream.loss_finding(options, Path::new(""), loss))
                .flat_map(|finding| finding.discards)
                .collect();
            actions.push(Action {
                file: stream.file(options, RAFT_FILE),
                change: format!(
                    "store the block store's salvaged manifest ({} segment(s); every other field kept)",
                    salvaged.manifest.segments.len()
                ),
                discards,
            });
            new_raft.manifest = salvaged.manifest.clone();
            changed = true;
        }
        _ => {}
    }
    let mut remove_consumers = false;
    if stream.consumers_damage.is_some() {
        remove_consumers = consumers_present(stream);
        let change = if remove_consumers {
            "remove it and clear the raft file's reference to it"
        } else {
            "clear the raft file's reference to it"
        };
        actions.push(Action {
            file: stream.file(options, CONSUMERS_FILE),
            change: change.into(),
            discards: vec![Discard::Consumers {
                stream: stream.name.clone(),
                names: stream.consumer_names.clone(),
            }],
        });
        new_raft.consumers = None;
        changed = true;
    }
    Planned::Changes(StreamPlan {
        actions,
        raft: changed.then_some(new_raft),
        remove_consumers,
        notes: Vec::new(),
    })
}

/// A missing or damaged `raft` file: rebuilt, which needs the stream's
/// journal records.
async fn plan_raft_rebuild(
    options: &CheckOptions,
    streams: &mut [StreamExamination],
    position: usize,
) -> Result<Planned, CheckError> {
    let groups: Vec<(String, Option<u64>)> = streams
        .iter()
        .map(|stream| (stream.name.clone(), stream.group()))
        .collect();
    let layout = super::layout::examine(options, &groups)?;
    let Some(effective) = layout
        .effective
        .filter(|_| layout.status == super::report::LayoutStatus::Ok)
    else {
        return Ok(Planned::Refused(format!(
            "rebuilding the raft file needs the stream's journal, which the layout names: repair the layout first ({})",
            options.repair_command(&RepairTarget::Layout)
        )));
    };
    for stream in streams.iter_mut() {
        stream.shard = Some(crate::jetstream::owner_of(
            &stream.name,
            effective.shard_count,
        ));
    }
    let stream = &streams[position];
    let shard = stream.shard.expect("set above");
    let journal = super::journal::examine(
        options,
        shard,
        Some(effective.journal_ids[shard]),
        &groups_of_shard(streams, shard),
        file_streams_of_shard(streams, shard),
    )
    .await?;
    if !journal_usable(&journal) {
        return Ok(Planned::Refused(format!(
            "rebuilding the raft file reads the stream's records from the journal of shard {shard}, which is damaged: repair it first ({})",
            options.repair_command(&RepairTarget::Journal(shard))
        )));
    }
    let rebuilt = stream
        .rebuilt
        .as_ref()
        .expect("examined without a raft file");
    let records = stream.group().and_then(|group| journal.groups.get(&group));
    let consumers = match &stream.consumers {
        Part::Present(consumers) => Some(consumers),
        _ => None,
    };
    let raft = rebuilt_raft(rebuilt, records, consumers, stream.generation);
    let why_applied = match (records.and_then(|records| records.lowest_index), consumers) {
        (Some((lowest, _)), _) => format!(
            "the stream's lowest entry in the journal is {lowest}: the journal is replayed from it"
        ),
        (None, Some(_)) => "the consumers file's: the journal holds nothing of the stream".into(),
        (None, None) => "nothing of the stream is in the journal or a consumers file".into(),
    };
    let note = format!(
        "at its next start the stream replays the journal's entries after index {}",
        raft.applied_index
    );
    let manifest = &raft.manifest;
    let mut actions = vec![Action {
        file: stream.file(options, RAFT_FILE),
        change: format!(
            "rebuild it: the block store files' {} segment(s) (sequences up to {}) and {} delete entries; applied index {} ({why_applied}); term {}",
            manifest.segments.len(),
            manifest.last_sequence,
            manifest.deletes.entries,
            raft.applied_index,
            raft.term
        ),
        discards: rebuilt.discards.clone(),
    }];
    let remove_consumers = matches!(stream.consumers, Part::Damaged(_));
    if remove_consumers {
        actions.push(Action {
            file: stream.file(options, CONSUMERS_FILE),
            change: "remove it (it cannot be read; the rebuilt raft file names no consumers file)"
                .into(),
            discards: vec![Discard::Consumers {
                stream: stream.name.clone(),
                names: stream.consumer_names.clone(),
            }],
        });
    }
    Ok(Planned::Changes(StreamPlan {
        actions,
        raft: Some(raft),
        remove_consumers,
        notes: vec![note],
    }))
}
