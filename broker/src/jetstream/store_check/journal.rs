//! A shard's journal, checked and repaired.
//!
//! Check: the segment files are all there at full size (else each missing
//! or resized one is damage), then `recovery::inspect` replays the journal
//! as the server would, writing nothing: on a `DmaDevice` when the set of
//! files is complete (so `open_directory` neither creates nor zero-fills
//! anything), otherwise on the files as the repair would leave them
//! (missing parts read as zeros). Blocks rebuilt from parity and a torn
//! tail are what the server repairs by itself (self-healing). Corruption
//! comes with the `Cut` that would make the journal open; what it discards
//! is counted from the batches readable after the cut point: per stream,
//! the Raft entries past its checkpoint and the messages among them, and
//! the sequences missing between the readable records either side (those
//! were in the damaged batch).
//!
//! Repair: recreate missing segment files zero-filled and bring resized
//! ones to full size (zeros after their content), then cut.

use std::collections::BTreeMap;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use tern_storage::dma::{segment_file_name, segment_path, DmaDevice, SyncMethod, PROBE_PREFIX};
use tern_storage::format::{
    BatchHeader, RecordHeader, RecordView, SegmentHeader, BATCH_HEADER_BYTES, BLOCK_BYTES,
};
use tern_storage::recovery::{self, Cut};
use tern_storage::{Device, JournalConfig, JournalError, RecoveryReport, RepairKind};

use super::read_only::SegmentImages;
use super::report::{Action, Discard, Finding, Health, RepairReport, Severity};
use super::{io_error, CheckError, CheckOptions, RepairTarget};
use crate::jetstream::entry;
use crate::jetstream::journal_location::JournalLocation;
use crate::jetstream::layout::{formatted_marker, journal_directory};
use tern_storage::journal_device::{Contents, JournalDevice};

/// Bytes written at a time when zero-filling a segment file.
const ZERO_CHUNK_BYTES: usize = 1 << 20;

/// The stream a journal group belongs to, as far as its files tell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct StreamOfGroup {
    pub name: String,
    /// The `raft` file's applied index (`None`: unreadable).
    pub applied_index: Option<u64>,
    /// The checkpoint's last sequence (0 when unknown).
    pub last_sequence: u64,
}

/// What the readable journal holds of one group.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct GroupRecords {
    /// Lowest Raft index of its entries, and that entry's term.
    pub lowest_index: Option<(u64, u64)>,
    /// Highest term of its entries and hard states.
    pub highest_term: u64,
    /// Highest Raft index of its entries.
    pub highest_index: u64,
    /// Highest message sequence among its entries.
    pub last_message_sequence: u64,
    pub entries: u64,
}

impl GroupRecords {
    fn observe(&mut self, record: &RecordView<'_>) {
        let header = &record.header;
        self.highest_term = self.highest_term.max(header.term);
        match header.kind {
            kind if entry::is_entry_record(kind) => {
                self.entries += 1;
                self.highest_index = self.highest_index.max(header.index);
                if self
                    .lowest_index
                    .is_none_or(|(lowest, _)| header.index < lowest)
                {
                    self.lowest_index = Some((header.index, header.term));
                }
                if header.kind == entry::RECORD_ENTRY_NORMAL {
                    if let Some(sequence) = entry::message_sequence(record.body) {
                        self.last_message_sequence = self.last_message_sequence.max(sequence);
                    }
                }
            }
            entry::RECORD_HARD_STATE => {
                if let Ok(hard_state) = entry::decode_hard_state(record.body) {
                    self.highest_term = self.highest_term.max(hard_state.term);
                }
            }
            _ => {}
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum JournalState {
    /// No segment file yet: created at the next start.
    Absent,
    /// An interrupted format (`.seg.new` files): formatted again at the
    /// next start; nothing was ever written.
    Formatting,
    Intact,
    /// Repairable: missing or resized files, or a cut.
    Damaged,
    /// Damaged in a way no cut repairs (another journal's segments,
    /// another format, unreadable); the reason.
    Unusable(String),
    /// Not inspected: the layout that names its id is not known.
    Unchecked,
}

pub(super) struct JournalExamination {
    pub shard: usize,
    pub directory: PathBuf,
    pub state: JournalState,
    pub findings: Vec<Finding>,
    pub missing: Vec<u32>,
    /// Segment files of another size: (segment, bytes).
    pub resized: Vec<(u32, u64)>,
    /// Where the readable log ends and what the cut discards.
    pub cut: Option<PlannedCut>,
    /// What the readable journal holds per group (up to the damage).
    pub groups: BTreeMap<u64, GroupRecords>,
    pub records: u64,
    /// The marker recording that this journal was formatted, when the
    /// journal holds nothing (erased): the repair removes it, so the next
    /// start formats the journal afresh.
    pub erased_marker: Option<PathBuf>,
    /// On a raw device (`directory` is then the device): the region's
    /// offset and how it is named.
    pub region: Option<(u64, String)>,
}

pub(super) struct PlannedCut {
    pub cut: Cut,
    pub file: String,
    pub offset: u64,
    /// (segment, from offset) that the cut zeroes.
    pub zeroed: Vec<(u32, u64)>,
    pub discards: Vec<Discard>,
}

impl JournalExamination {
    pub(super) fn health(&self) -> Health {
        match self.state {
            JournalState::Absent | JournalState::Formatting | JournalState::Intact => Health::Ok,
            JournalState::Damaged | JournalState::Unusable(_) => Health::Damaged,
            JournalState::Unchecked => Health::Unknown,
        }
    }
}

fn journal_config(options: &CheckOptions, shard: usize, journal_id: u64) -> JournalConfig {
    JournalConfig {
        shard: shard as u32,
        // Not used by recovery; what a journal of this segment size allows.
        batch_bytes_max: (options.journal_segment_bytes as usize / 2) / BLOCK_BYTES * BLOCK_BYTES,
        sync: options.sync,
        journal_id,
        formatted_before: false,
    }
}

/// Checks shard `shard`'s journal (read-only). `groups`: the streams this
/// shard owns, by group; `file_streams`: how many (a missing journal is
/// damage only if some stream keeps records there).
pub(super) async fn examine(
    options: &CheckOptions,
    shard: usize,
    journal_id: Option<u64>,
    groups: &BTreeMap<u64, StreamOfGroup>,
    file_streams: usize,
) -> Result<JournalExamination, CheckError> {
    let directory = journal_directory(&options.journal_dir, shard);
    let relative = options.relative(&directory);
    let command = options.repair_command(&RepairTarget::Journal(shard));
    let segments = options.journal_segments;
    let mut examination = JournalExamination {
        shard,
        directory: directory.clone(),
        state: JournalState::Intact,
        findings: Vec::new(),
        missing: Vec::new(),
        resized: Vec::new(),
        cut: None,
        groups: BTreeMap::new(),
        records: 0,
        erased_marker: None,
        region: None,
    };
    let marker = formatted_marker(&options.jetstream_root(), shard);
    let formatted_before = marker.exists();
    if options.journal_device {
        examination.directory = options.journal_dir.clone();
        return examine_region(
            options,
            examination,
            journal_id,
            groups,
            file_streams,
            (formatted_before, marker),
        )
        .await;
    }
    if !DmaDevice::directory_has_segments(&directory, segments) {
        if file_streams == 0 && !formatted_before {
            absent(
                &mut examination,
                relative,
                "no journal yet (created at the next start)",
            );
            return Ok(examination);
        }
        examination.state = JournalState::Damaged;
        examination.missing = (0..segments).collect();
        let why = if file_streams > 0 {
            format!(
                "{file_streams} file stream(s) of shard {shard} keep their newest messages there"
            )
        } else {
            format!(
                "{} records that it was formatted",
                options.relative(&marker)
            )
        };
        if formatted_before {
            examination.erased_marker = Some(marker);
        }
        examination.findings.push(
            Finding::new(
                Severity::Damage,
                relative,
                format!("the journal is missing ({why})"),
            )
            .discarding(vec![Discard::Other {
                text: "whatever the journal held past each stream's last checkpoint (it is created afresh)"
                    .into(),
            }])
            .repaired_by(command),
        );
        return Ok(examination);
    }
    if (0..segments).any(|segment| {
        directory
            .join(format!("{}.new", segment_file_name(segment)))
            .exists()
    }) {
        examination.state = JournalState::Formatting;
        examination.findings.push(Finding::new(
            Severity::SelfHealing,
            relative,
            "an interrupted format (.seg.new files): formatted afresh at the next start (nothing was written to it)",
        ));
        return Ok(examination);
    }
    for segment in 0..segments {
        let path = segment_path(&directory, segment);
        let file = options.relative(&path);
        match std::fs::metadata(&path) {
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                examination.missing.push(segment);
                examination.findings.push(
                    Finding::new(
                        Severity::Damage,
                        file.clone(),
                        "missing while the journal's other segments exist",
                    )
                    .discarding(vec![Discard::Other {
                        text: format!("whatever {file} held (it is recreated zero-filled)"),
                    }])
                    .repaired_by(command.clone()),
                );
            }
            Err(error) => return Err(io_error(&path)(error)),
            Ok(meta) if meta.len() != options.journal_segment_bytes => {
                examination.resized.push((segment, meta.len()));
                let discard = if meta.len() < options.journal_segment_bytes {
                    format!(
                        "whatever {file} held past byte {} (zeros are written there)",
                        meta.len()
                    )
                } else {
                    format!(
                        "the {} bytes of {file} past the segment size (not part of the segment)",
                        meta.len() - options.journal_segment_bytes
                    )
                };
                examination.findings.push(
                    Finding::new(
                        Severity::Damage,
                        file,
                        format!(
                            "{} bytes, expected {}: truncated or resized",
                            meta.len(),
                            options.journal_segment_bytes
                        ),
                    )
                    .at(meta.len().min(options.journal_segment_bytes))
                    .discarding(vec![Discard::Other { text: discard }])
                    .repaired_by(command.clone()),
                );
            }
            Ok(_) => {}
        }
    }
    let files_damaged = !examination.missing.is_empty() || !examination.resized.is_empty();
    let Some(journal_id) = journal_id else {
        unchecked(&mut examination, relative);
        return Ok(examination);
    };
    let config = journal_config(options, shard, journal_id);
    let (inspected, groups_found, records) = if files_damaged || has_probe_leftovers(&directory) {
        // As the journal will read once its files are whole again (and
        // without the probe, which would remove the leftovers).
        let images = SegmentImages::open(&directory, segments, options.journal_segment_bytes)?;
        inspect_on(&images, &config).await
    } else {
        // The whole set is there at full size: open_directory neither
        // creates nor formats anything.
        let device = DmaDevice::open_directory(
            &directory,
            segments,
            options.journal_segment_bytes,
            SyncMethod::for_policy(options.sync),
        )
        .await?;
        inspect_on(&device, &config).await
    };
    let plan = match &inspected {
        Err(JournalError::Corrupt { cut: Some(cut), .. }) => {
            let images = SegmentImages::open(&directory, segments, options.journal_segment_bytes)?;
            Some(plan_cut(&images, journal_id, *cut, groups, &groups_found).await?)
        }
        _ => None,
    };
    let place = Place::Directory(&directory);
    judge(
        options,
        &mut examination,
        &place,
        Inspection {
            inspected,
            groups: groups_found,
            records,
            plan,
            files_damaged,
        },
        (formatted_before, marker),
    )?;
    Ok(examination)
}

/// [`examine`] for a journal in a region of a raw device: the device header
/// (read without repairing it, the device held exclusively so no server
/// starts meanwhile), then the region as the server would read it.
async fn examine_region(
    options: &CheckOptions,
    mut examination: JournalExamination,
    journal_id: Option<u64>,
    groups: &BTreeMap<u64, StreamOfGroup>,
    file_streams: usize,
    (formatted_before, marker): (bool, PathBuf),
) -> Result<JournalExamination, CheckError> {
    let shard = examination.shard;
    let path = options.journal_dir.clone();
    let shown = options.relative(&path);
    let device = JournalDevice::open(&path)?;
    let unusable = |examination: &mut JournalExamination, reason: String| {
        examination.state = JournalState::Unusable(reason.clone());
        examination
            .findings
            .push(Finding::new(Severity::Damage, shown.clone(), reason));
    };
    let header = match device.contents_unchanged() {
        Err(error) => {
            unusable(&mut examination, format!("{error}; no repair rewrites it"));
            return Ok(examination);
        }
        Ok(Contents::Empty) if file_streams == 0 && !formatted_before => {
            absent(
                &mut examination,
                shown,
                "no journal header yet (the device is formatted at the next start)",
            );
            return Ok(examination);
        }
        Ok(Contents::Empty) => {
            unusable(
                &mut examination,
                "the device has no tern journal header, but the store holds JetStream data: its journal was elsewhere, or this is another device".into(),
            );
            return Ok(examination);
        }
        Ok(Contents::Tern { header, repaired }) => {
            if repaired {
                examination.findings.push(Finding::new(
                    Severity::SelfHealing,
                    shown.clone(),
                    "one copy of the device header is damaged: rewritten from the other at the next start (nothing is lost)",
                ));
            }
            header
        }
    };
    let Some(journal_id) = journal_id else {
        unchecked(&mut examination, shown);
        return Ok(examination);
    };
    if header.journal_ids.get(shard) != Some(&journal_id) {
        unusable(
            &mut examination,
            format!(
                "the device holds the journals {:x?}, not this store's journal {journal_id:x} for shard {shard}; no repair rewrites it",
                header.journal_ids
            ),
        );
        return Ok(examination);
    }
    if (header.segments, header.segment_bytes)
        != (options.journal_segments, options.journal_segment_bytes)
    {
        unusable(
            &mut examination,
            format!(
                "the device was laid out with {} segments of {} bytes per shard; the configuration asks for {} of {} (journal_segments, journal_segment_size): check with the server's settings",
                header.segments,
                header.segment_bytes,
                options.journal_segments,
                options.journal_segment_bytes
            ),
        );
        return Ok(examination);
    }
    let offset = header.region_offset(shard);
    let description = JournalLocation::Region {
        device: path.clone(),
        shard,
        offset,
    }
    .to_string();
    let region = DmaDevice::open_region(
        &path,
        offset,
        options.journal_segments,
        options.journal_segment_bytes,
        SyncMethod::for_policy(options.sync),
        description.clone(),
    )
    .await?;
    let config = journal_config(options, shard, journal_id);
    let (inspected, groups_found, records) = inspect_on(&region, &config).await;
    let plan = match &inspected {
        Err(JournalError::Corrupt { cut: Some(cut), .. }) => {
            Some(plan_cut(&region, journal_id, *cut, groups, &groups_found).await?)
        }
        _ => None,
    };
    judge(
        options,
        &mut examination,
        &Place::Region(&description),
        Inspection {
            inspected,
            groups: groups_found,
            records,
            plan,
            files_damaged: false,
        },
        (formatted_before, marker),
    )?;
    examination.region = Some((offset, description));
    drop(device);
    Ok(examination)
}

/// No journal yet, and nothing says there was one: created at the next start.
fn absent(examination: &mut JournalExamination, shown: String, reason: &str) {
    examination.state = JournalState::Absent;
    examination
        .findings
        .push(Finding::new(Severity::Ok, shown, reason));
}

/// Not inspected: the journal's id comes from the layout, which is damaged.
fn unchecked(examination: &mut JournalExamination, shown: String) {
    examination.state = JournalState::Unchecked;
    examination.findings.push(Finding::new(
        Severity::Note,
        shown,
        "not inspected: the layout that names its journal id is damaged (repair the layout first)",
    ));
}

/// How findings name a journal's segments.
enum Place<'a> {
    /// A directory's segment files, relative to the store.
    Directory(&'a Path),
    /// The segments of one shard's region of a raw device, as the device
    /// names them (`segment N of <description>`).
    Region(&'a str),
}

impl Place<'_> {
    /// `name`: a segment as the device names it.
    fn file(&self, options: &CheckOptions, name: &str) -> String {
        match self {
            Place::Directory(directory) => options.relative(&directory.join(name)),
            Place::Region(_) => name.to_string(),
        }
    }
}

/// What a cut zeroes ((segment, from offset)) and what it discards.
type CutPlan = (Vec<(u32, u64)>, Vec<Discard>);

/// What inspecting a journal gave.
struct Inspection {
    inspected: Result<RecoveryReport, JournalError>,
    groups: BTreeMap<u64, GroupRecords>,
    records: u64,
    /// For a corruption with a cut: what the cut zeroes and discards.
    plan: Option<CutPlan>,
    /// Segment files missing or resized (a directory's only).
    files_damaged: bool,
}

/// The findings and state of an inspected journal. `marker`: whether the
/// store's marker says the journal was formatted, and its path.
fn judge(
    options: &CheckOptions,
    examination: &mut JournalExamination,
    place: &Place<'_>,
    inspection: Inspection,
    (formatted_before, marker): (bool, PathBuf),
) -> Result<(), CheckError> {
    let relative = options.relative(&examination.directory);
    let command = options.repair_command(&RepairTarget::Journal(examination.shard));
    let Inspection {
        inspected,
        groups,
        records,
        plan,
        files_damaged,
    } = inspection;
    examination.groups = groups;
    // Up to the damage, if any.
    examination.records = records;
    match inspected {
        Ok(report) if report.live_segments.is_empty() && formatted_before => {
            examination.state = JournalState::Damaged;
            examination.findings.push(
                Finding::new(
                    Severity::Damage,
                    relative,
                    format!(
                        "the journal holds nothing, but {} records that it was formatted: it was erased or replaced",
                        options.relative(&marker)
                    ),
                )
                .discarding(vec![Discard::Other {
                    text: "whatever the journal held past each stream's last checkpoint (it is formatted afresh)"
                        .into(),
                }])
                .repaired_by(command),
            );
            examination.erased_marker = Some(marker);
        }
        Ok(report) => {
            examination.state = if files_damaged {
                JournalState::Damaged
            } else {
                JournalState::Intact
            };
            examination
                .findings
                .extend(healing_findings(options, place, &report));
            if !files_damaged {
                examination.findings.push(Finding::new(
                    Severity::Ok,
                    relative,
                    intact_summary(&report),
                ));
            }
        }
        Err(JournalError::Corrupt {
            file,
            offset,
            reason,
            cut,
            ..
        }) => {
            let file = place.file(options, &file);
            let mut finding = Finding::new(Severity::Damage, file.clone(), reason).at(offset);
            match (cut, plan) {
                (Some(cut), Some((zeroed, discards))) => {
                    finding = finding.discarding(discards.clone()).repaired_by(command);
                    examination.cut = Some(PlannedCut {
                        cut,
                        file,
                        offset,
                        zeroed,
                        discards,
                    });
                    examination.state = JournalState::Damaged;
                }
                _ => {
                    finding.reason.push_str(
                        "; no cut repairs this (restore the journal from a backup, or delete the shard's streams)",
                    );
                    examination.state = JournalState::Unusable(finding.reason.clone());
                }
            }
            examination.findings.push(finding);
        }
        Err(
            error @ (JournalError::Foreign { .. }
            | JournalError::Version { .. }
            | JournalError::Read(_)),
        ) => {
            let reason = format!("{error}; no repair rewrites it");
            examination.state = JournalState::Unusable(reason.clone());
            examination
                .findings
                .push(Finding::new(Severity::Damage, relative, reason));
        }
        Err(source) => {
            return Err(CheckError::Journal {
                directory: examination.directory.display().to_string(),
                source,
            })
        }
    }
    Ok(())
}

/// Leftover O_DIRECT probe files (a process died while probing): opening
/// a `DmaDevice` removes them, which a check must not.
fn has_probe_leftovers(directory: &Path) -> bool {
    std::fs::read_dir(directory).is_ok_and(|entries| {
        entries.filter_map(|entry| entry.ok()).any(|entry| {
            entry
                .file_name()
                .to_string_lossy()
                .starts_with(PROBE_PREFIX)
        })
    })
}

async fn inspect_on<D: Device>(
    device: &D,
    config: &JournalConfig,
) -> (
    Result<RecoveryReport, JournalError>,
    BTreeMap<u64, GroupRecords>,
    u64,
) {
    let mut groups: BTreeMap<u64, GroupRecords> = BTreeMap::new();
    let mut records = 0;
    let inspected = recovery::inspect(device, config, |record| {
        records += 1;
        groups
            .entry(record.header.group)
            .or_default()
            .observe(&record);
    })
    .await;
    (inspected, groups, records)
}

fn intact_summary(report: &RecoveryReport) -> String {
    if report.records == 0 {
        return "intact, empty".into();
    }
    format!(
        "intact: {} records in {} batches, journal sequences {}..={}",
        report.records, report.batches, report.first_sequence, report.last_sequence
    )
}

/// What the server repairs by itself at its next start.
fn healing_findings(
    options: &CheckOptions,
    place: &Place<'_>,
    report: &RecoveryReport,
) -> Vec<Finding> {
    let mut findings = Vec::new();
    for repair in &report.repairs {
        let what = match repair.kind {
            RepairKind::BlockFromParity { batch_offset } => {
                format!("a damaged block of the batch at offset {batch_offset}, rebuilt from its parity block")
            }
            RepairKind::Parity { batch_offset } => {
                format!(
                    "the damaged parity block of the batch at offset {batch_offset}, recomputed"
                )
            }
            RepairKind::SegmentHeader => {
                "the damaged segment header, rebuilt from the segment's first batch".into()
            }
        };
        findings.push(
            Finding::new(
                Severity::SelfHealing,
                place.file(options, &repair.file),
                format!("{what} and written back at the next start (nothing is lost)"),
            )
            .at(repair.offset),
        );
    }
    if let Some(cut) = &report.tail_cut {
        let file = match place {
            Place::Directory(directory) => {
                options.relative(&directory.join(segment_file_name(cut.segment)))
            }
            Place::Region(description) => format!("segment {} of {description}", cut.segment),
        };
        let reason = if cut.batches_dropped > 0 {
            format!(
                "{} (sync = never: {} later batch(es) dropped); cut at the next start",
                cut.reason, cut.batches_dropped
            )
        } else {
            format!(
                "{}: a write that was never acknowledged, cut at the next start",
                cut.reason
            )
        };
        findings.push(Finding::new(Severity::SelfHealing, file, reason).at(cut.offset));
    }
    findings
}

/// The generation a segment image holds: its header's, or (header
/// unreadable) its first batch's; `None`: nothing of this journal.
fn segment_generation(image: &[u8], journal_id: u64) -> Option<u64> {
    if let Some(header) = SegmentHeader::decode(&image[..BLOCK_BYTES]) {
        return (header.journal_id == journal_id).then_some(header.generation);
    }
    BatchHeader::decode(&image[BLOCK_BYTES..BLOCK_BYTES + BATCH_HEADER_BYTES])
        .filter(|batch| !batch.footer && batch.journal_id == journal_id)
        .map(|batch| batch.generation)
}

/// Every record (each verified by its own checksum) of the batches of
/// `generation` from `from` on: a batch is recognised by a header at its
/// own offset; anything else is skipped a block at a time.
pub(super) fn scan_batches(
    image: &[u8],
    from: usize,
    generation: u64,
    journal_id: u64,
    mut on_record: impl FnMut(RecordView<'_>),
) {
    let mut offset = from;
    while offset + BLOCK_BYTES <= image.len() {
        let batch =
            BatchHeader::decode(&image[offset..offset + BATCH_HEADER_BYTES]).filter(|batch| {
                !batch.footer
                    && batch.generation == generation
                    && batch.journal_id == journal_id
                    && batch.offset == offset as u64
                    && batch.batch_bytes as usize >= 2 * BLOCK_BYTES
                    && offset + batch.batch_bytes as usize <= image.len()
            });
        let Some(batch) = batch else {
            offset += BLOCK_BYTES;
            continue;
        };
        let end = offset + batch.batch_bytes as usize;
        let records_end = (offset + BATCH_HEADER_BYTES + batch.records_bytes as usize).min(end);
        let mut at = offset + BATCH_HEADER_BYTES;
        for _ in 0..batch.record_count {
            let Some((view, used)) = RecordHeader::decode(&image[at..records_end]) else {
                break;
            };
            on_record(view);
            at += used;
        }
        offset = end;
    }
}

/// One record the cut discards.
struct Discarded {
    group: u64,
    kind: u8,
    index: u64,
    message: Option<u64>,
}

/// What zeroing at `cut` takes: the (segment, from offset) it zeroes, and
/// per stream the entries past its checkpoint and the messages among them.
async fn plan_cut<D: Device>(
    images: &D,
    journal_id: u64,
    cut: Cut,
    groups: &BTreeMap<u64, StreamOfGroup>,
    before: &BTreeMap<u64, GroupRecords>,
) -> Result<CutPlan, CheckError> {
    let segment_bytes = images.segment_bytes() as usize;
    let mut generations = Vec::new();
    for segment in 0..images.segment_count() {
        let head = images.read(segment, 0, 2 * BLOCK_BYTES).await?;
        generations.push(segment_generation(head.as_ref(), journal_id));
    }
    let (from_generation, within) = match cut {
        Cut::At { segment, offset } => (
            generations[segment as usize].map_or(u64::MAX, |generation| generation + 1),
            Some((segment, offset)),
        ),
        Cut::Generations { from } => (from, None),
    };
    let mut zeroed = Vec::new();
    let mut discarded = Vec::new();
    // In generation order, so records come out in log order.
    let mut order: Vec<(u64, u32)> = generations
        .iter()
        .enumerate()
        .filter_map(|(segment, generation)| generation.map(|g| (g, segment as u32)))
        .collect();
    order.sort();
    for (generation, segment) in order {
        // Where its readable batches are looked for, and where zeroing starts.
        let (start, zero_from) = match within {
            Some((at, offset)) if at == segment => (offset as usize, offset),
            _ if generation >= from_generation => (BLOCK_BYTES, 0),
            _ => continue,
        };
        zeroed.push((segment, zero_from));
        let image = images.read(segment, 0, segment_bytes).await?;
        scan_batches(image.as_ref(), start, generation, journal_id, |record| {
            let header = record.header;
            let message = (header.kind == entry::RECORD_ENTRY_NORMAL)
                .then(|| entry::message_sequence(record.body))
                .flatten();
            discarded.push(Discarded {
                group: header.group,
                kind: header.kind,
                index: header.index,
                message,
            });
        });
    }
    Ok((zeroed, discards_of(&discarded, groups, before)))
}

/// Per stream (by name): the entries past its checkpoint, the messages
/// missing between the readable records before and after the damage, and
/// the readable messages after it.
fn discards_of(
    discarded: &[Discarded],
    groups: &BTreeMap<u64, StreamOfGroup>,
    before: &BTreeMap<u64, GroupRecords>,
) -> Vec<Discard> {
    let mut orphans = 0;
    let mut per_stream: BTreeMap<&str, (u64, Vec<u64>, Vec<u64>)> = BTreeMap::new();
    for record in discarded {
        let is_entry = entry::is_entry_record(record.kind);
        let Some(stream) = groups.get(&record.group) else {
            orphans += u64::from(is_entry);
            continue;
        };
        // Entries up to the checkpoint are in the block store already.
        if !is_entry || record.index <= stream.applied_index.unwrap_or(0) {
            continue;
        }
        let (_, indexes, messages) = per_stream.entry(stream.name.as_str()).or_insert((
            record.group,
            Vec::new(),
            Vec::new(),
        ));
        indexes.push(record.index);
        messages.extend(record.message);
    }
    let mut discards = Vec::new();
    for (name, (group, indexes, mut messages)) in per_stream {
        let stream = name.to_string();
        let checkpointed = groups[&group].applied_index.unwrap_or(0);
        let before = before.get(&group);
        // Raft indexes are consecutive: those between the last readable
        // entry before the damage and the last after it are all lost.
        let first_index = before
            .map_or(0, |records| records.highest_index)
            .max(checkpointed)
            .saturating_add(1)
            .min(*indexes.iter().min().expect("at least one"));
        let last_index = *indexes.iter().max().expect("at least one");
        discards.push(Discard::Entries {
            stream: stream.clone(),
            first_index,
            last_index,
            entries: last_index + 1 - first_index,
        });
        messages.sort_unstable();
        messages.dedup();
        let Some(&first_after) = messages.first() else {
            continue;
        };
        let last_before = before
            .map_or(0, |records| records.last_message_sequence)
            .max(groups[&group].last_sequence);
        // Sequences are assigned consecutively: those between the last
        // readable before the damage and the first readable after were in
        // the batches that cannot be read.
        if first_after > last_before + 1 {
            discards.push(Discard::Messages {
                stream: stream.clone(),
                first_sequence: last_before + 1,
                last_sequence: first_after - 1,
                messages: first_after - 1 - last_before,
                note: Some("in the damaged batch, which cannot be read".into()),
            });
        }
        for (first, last) in runs(&messages) {
            discards.push(Discard::Messages {
                stream: stream.clone(),
                first_sequence: first,
                last_sequence: last,
                messages: last - first + 1,
                note: None,
            });
        }
    }
    if orphans > 0 {
        discards.push(Discard::OrphanRecords { records: orphans });
    }
    discards.push(Discard::Other {
        text: "whatever else the damaged batch held (it cannot be read; its messages are listed above only when readable records follow them)"
            .into(),
    });
    discards
}

/// Consecutive runs of ascending, distinct `values`.
fn runs(values: &[u64]) -> Vec<(u64, u64)> {
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for &value in values {
        match runs.last_mut() {
            Some((_, last)) if *last + 1 == value => *last = value,
            _ => runs.push((value, value)),
        }
    }
    runs
}

/// `shard-<i>` directories past the shard count: no server reads them.
pub(super) fn unused_directories(options: &CheckOptions, shard_count: usize) -> Vec<Finding> {
    let Ok(entries) = std::fs::read_dir(&options.journal_dir) else {
        return Vec::new();
    };
    let mut unused: Vec<(usize, PathBuf)> = entries
        .filter_map(|entry| entry.ok())
        .filter_map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            let shard = name.strip_prefix("shard-")?.parse::<usize>().ok()?;
            (shard >= shard_count && entry.path().is_dir()).then(|| (shard, entry.path()))
        })
        .collect();
    unused.sort();
    unused
        .into_iter()
        .map(|(_, path)| {
            Finding::new(
                Severity::Note,
                options.relative(&path),
                format!("not used: the store has {shard_count} shard(s)"),
            )
        })
        .collect()
}

/// `tern storage repair --journal <shard>`.
pub(super) async fn repair(
    options: &CheckOptions,
    shard: usize,
    confirm: bool,
) -> Result<RepairReport, CheckError> {
    let target = RepairTarget::Journal(shard).describe();
    let (streams, _) = super::stream::examine_all(options).await?;
    let names: Vec<(String, Option<u64>)> = streams
        .iter()
        .map(|stream| (stream.name.clone(), stream.group()))
        .collect();
    let layout = super::layout::examine(options, &names)?;
    let Some(effective) = layout
        .effective
        .filter(|_| layout.status == super::report::LayoutStatus::Ok)
    else {
        return Ok(RepairReport::refused(
            target,
            format!(
                "the layout is {}: it names each journal's id; repair it first ({})",
                layout.status,
                options.repair_command(&RepairTarget::Layout)
            ),
        ));
    };
    if shard >= effective.shard_count {
        return Err(CheckError::NoSuchShard {
            shard,
            shard_count: effective.shard_count,
        });
    }
    let mut streams = streams;
    for stream in &mut streams {
        stream.shard = Some(super::super::owner_of(&stream.name, effective.shard_count));
    }
    let journal_id = effective.journal_ids[shard];
    let examination = examine(
        options,
        shard,
        Some(journal_id),
        &super::stream::groups_of_shard(&streams, shard),
        super::stream::file_streams_of_shard(&streams, shard),
    )
    .await?;
    let actions = match &examination.state {
        JournalState::Unusable(reason) => return Ok(RepairReport::refused(target, reason.clone())),
        JournalState::Unchecked => unreachable!("the layout is valid"),
        JournalState::Absent | JournalState::Formatting | JournalState::Intact => {
            return Ok(RepairReport::plan(target, Vec::new(), Vec::new()))
        }
        JournalState::Damaged => planned_actions(options, &examination),
    };
    let mut report = RepairReport::plan(target, actions, Vec::new());
    if !confirm {
        return Ok(report);
    }
    let config = journal_config(options, shard, journal_id);
    let sync = SyncMethod::for_policy(options.sync);
    // A raw device is held exclusively while it is repaired.
    let (device, _held) = match &examination.region {
        Some((offset, description)) => {
            let held = JournalDevice::open(&examination.directory)?;
            let device = DmaDevice::open_region(
                &examination.directory,
                *offset,
                options.journal_segments,
                options.journal_segment_bytes,
                sync,
                description.clone(),
            )
            .await?;
            (device, Some(held))
        }
        None => {
            restore_segment_files(options, &examination)?;
            let device = DmaDevice::open_directory(
                &examination.directory,
                options.journal_segments,
                options.journal_segment_bytes,
                sync,
            )
            .await?;
            (device, None)
        }
    };
    let journal_error = |source| CheckError::Journal {
        directory: examination.directory.display().to_string(),
        source,
    };
    if let Some(planned) = &examination.cut {
        match recovery::inspect(&device, &config, |_| {}).await {
            // The files read as the plan saw them: the same cut.
            Err(JournalError::Corrupt { cut: Some(cut), .. }) if cut == planned.cut => {
                recovery::cut(&device, &config, &cut)
                    .await
                    .map_err(journal_error)?;
            }
            other => report.notes.push(format!(
                "not cut: the journal no longer reads as planned ({}); run `tern storage check` again",
                match other {
                    Ok(_) => "it opens".to_string(),
                    Err(error) => error.to_string(),
                }
            )),
        }
    }
    if let Some(marker) = &examination.erased_marker {
        let root = marker
            .parent()
            .expect("the marker is in the store's jetstream directory");
        std::fs::remove_file(marker)
            .and_then(|()| std::fs::File::open(root)?.sync_all())
            .map_err(io_error(marker))?;
    }
    report.applied = true;
    match recovery::inspect(&device, &config, |_| {}).await {
        Ok(opened) => report
            .notes
            .push(format!("the journal opens: {}", intact_summary(&opened))),
        Err(error) => report.notes.push(format!(
            "the journal is still damaged: {error}; run `tern storage check` again"
        )),
    }
    Ok(report)
}

fn planned_actions(options: &CheckOptions, examination: &JournalExamination) -> Vec<Action> {
    let directory = &examination.directory;
    let segment_bytes = options.journal_segment_bytes;
    let mut actions = Vec::new();
    for &segment in &examination.missing {
        actions.push(Action {
            file: options.relative(&segment_path(directory, segment)),
            change: format!("create it zero-filled ({segment_bytes} bytes)"),
            discards: vec![Discard::Other {
                text: "whatever the missing file held".into(),
            }],
        });
    }
    for &(segment, bytes) in &examination.resized {
        let change = if bytes < segment_bytes {
            format!("extend it from {bytes} to {segment_bytes} bytes with zeros")
        } else {
            format!("cut it from {bytes} to {segment_bytes} bytes")
        };
        actions.push(Action {
            file: options.relative(&segment_path(directory, segment)),
            change,
            discards: vec![Discard::Other {
                text: "whatever was in the missing part".into(),
            }],
        });
    }
    if let Some(marker) = &examination.erased_marker {
        actions.push(Action {
            file: options.relative(marker),
            change: "remove it: the next start formats the journal afresh".into(),
            discards: vec![Discard::Other {
                text: "whatever the journal held past each stream's last checkpoint".into(),
            }],
        });
    }
    if let Some(cut) = &examination.cut {
        let zeroed: Vec<String> = cut
            .zeroed
            .iter()
            .map(|&(segment, offset)| {
                if offset == 0 {
                    format!("all of {}", segment_file_name(segment))
                } else {
                    format!("{} from offset {offset}", segment_file_name(segment))
                }
            })
            .collect();
        actions.push(Action {
            file: cut.file.clone(),
            change: format!(
                "cut the log where it stops being readable (offset {}): zero {}",
                cut.offset,
                zeroed.join(", ")
            ),
            discards: cut.discards.clone(),
        });
    }
    actions
}

/// Recreates missing segment files zero-filled and brings resized ones to
/// the segment size (zeros after their content); durable when it returns.
fn restore_segment_files(
    options: &CheckOptions,
    examination: &JournalExamination,
) -> Result<(), CheckError> {
    let directory = &examination.directory;
    let segment_bytes = options.journal_segment_bytes;
    std::fs::create_dir_all(directory).map_err(io_error(directory))?;
    for &segment in &examination.missing {
        let path = segment_path(directory, segment);
        // Built under a hidden name and renamed into place whole, so an
        // interrupted repair leaves no short segment file.
        let building = directory.join(format!(".{}.repair", segment_file_name(segment)));
        let file = std::fs::File::create(&building).map_err(io_error(&building))?;
        zero_fill(&file, 0, segment_bytes).map_err(io_error(&building))?;
        std::fs::rename(&building, &path).map_err(io_error(&path))?;
    }
    for &(segment, bytes) in &examination.resized {
        let path = segment_path(directory, segment);
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .map_err(io_error(&path))?;
        if bytes > segment_bytes {
            file.set_len(segment_bytes).map_err(io_error(&path))?;
        }
        zero_fill(&file, bytes.min(segment_bytes), segment_bytes).map_err(io_error(&path))?;
    }
    std::fs::File::open(directory)
        .and_then(|directory| directory.sync_all())
        .map_err(io_error(directory))
}

/// Writes zeros over `[from, to)` of `file` (real blocks, not a sparse
/// extension: see `dma`'s zero-fill), then syncs it.
fn zero_fill(file: &std::fs::File, from: u64, to: u64) -> std::io::Result<()> {
    let zeros = vec![0u8; ZERO_CHUNK_BYTES];
    let mut offset = from;
    while offset < to {
        let bytes = ZERO_CHUNK_BYTES.min((to - offset) as usize);
        file.write_all_at(&zeros[..bytes], offset)?;
        offset += bytes as u64;
    }
    file.sync_all()
}
