//! The store's `layout` (shard count and journal ids), checked, and
//! rebuilt from the journals when they say it unambiguously:
//!
//! - the shard count is the number of `shard-<i>` directories under the
//!   journal directory, which must run from 0 without a gap;
//! - each journal's id is the one its verified segment headers (or a
//!   verified batch header at block 1, where a header is damaged) carry,
//!   all the same; a journal whose files are all zeros was never written
//!   and gets a new id; one that holds data no header names is ambiguous;
//! - every stream whose records are in a journal must be owned by that
//!   journal's shard under the rebuilt count.
//!
//! Never written over a valid layout.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::FileExt;
use std::path::Path;

use tern_storage::dma::segment_path;
use tern_storage::format::{BatchHeader, SegmentHeader, BATCH_HEADER_BYTES, BLOCK_BYTES};

use super::journal::scan_batches;
use super::report::{Action, Finding, LayoutStatus, RepairReport, Severity};
use super::{io_error, CheckError, CheckOptions, RepairTarget};
use crate::jetstream::layout::{self as store_layout, journal_directory, Layout, LayoutError};
use crate::jetstream::owner_of;

/// Bytes read at a time when looking for data in a journal without ids.
const READ_CHUNK_BYTES: usize = 1 << 20;

/// What a layout rebuild would write, or why there is none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Rebuild {
    Unambiguous { layout: Layout, notes: Vec<String> },
    Refused(String),
}

pub(super) struct LayoutExamination {
    pub status: LayoutStatus,
    /// The layout the rest of the check uses: the valid one, or the one a
    /// rebuild would write.
    pub effective: Option<Layout>,
    pub rebuild: Option<Rebuild>,
    pub findings: Vec<Finding>,
}

fn describe(layout: &Layout) -> String {
    let ids: Vec<String> = layout
        .journal_ids
        .iter()
        .enumerate()
        .map(|(shard, id)| format!("shard {shard} {id:016x}"))
        .collect();
    format!(
        "{} shard(s), journal ids {}",
        layout.shard_count,
        ids.join(", ")
    )
}

/// Checks `jetstream/layout` (read-only). `streams`: every stream
/// directory's name and (config readable) Raft group.
pub(super) fn examine(
    options: &CheckOptions,
    streams: &[(String, Option<u64>)],
) -> Result<LayoutExamination, CheckError> {
    let file = options.relative(&options.jetstream_root().join("layout"));
    let command = options.repair_command(&RepairTarget::Layout);
    let read = store_layout::read(
        &options.store_dir,
        &options.journal_dir,
        options.journal_segments,
    );
    let (status, reason) = match read {
        Ok(Some(layout)) => {
            let finding = Finding::new(Severity::Ok, file, describe(&layout));
            return Ok(LayoutExamination {
                status: LayoutStatus::Ok,
                effective: Some(layout),
                rebuild: None,
                findings: vec![finding],
            });
        }
        Ok(None) => {
            return Ok(LayoutExamination {
                status: LayoutStatus::Absent,
                effective: None,
                rebuild: None,
                findings: vec![Finding::new(
                    Severity::Ok,
                    file,
                    "no layout and no JetStream data: created at the next start",
                )],
            })
        }
        Err(LayoutError::OldFormat { .. }) => {
            return Ok(LayoutExamination {
                status: LayoutStatus::OldFormat,
                effective: None,
                rebuild: None,
                findings: vec![Finding::new(
                    Severity::Damage,
                    file,
                    "written by an earlier tern (store format 1), whose journals this version cannot read: start the earlier version on it, or move the data away",
                )],
            })
        }
        Err(LayoutError::Missing { evidence, .. }) => (
            LayoutStatus::MissingBesideData,
            format!("missing beside JetStream data ({evidence})"),
        ),
        Err(LayoutError::Damaged { reason, .. }) => {
            (LayoutStatus::Damaged, format!("damaged: {reason}"))
        }
        Err(error) => return Err(error.into()),
    };
    let rebuild = rebuild(options, streams, crate::random::random_u64)?;
    let mut findings = Vec::new();
    let effective = match &rebuild {
        Rebuild::Unambiguous { layout, notes } => {
            let mut finding = Finding::new(
                Severity::Damage,
                file.clone(),
                format!(
                    "{reason}; the journals name it unambiguously: {}",
                    describe(layout)
                ),
            )
            .repaired_by(command);
            for note in notes {
                finding.reason.push_str(&format!("; {note}"));
            }
            findings.push(finding);
            findings.push(Finding::new(
                Severity::Note,
                file,
                "the journals and stream owners are checked against the layout the repair would write",
            ));
            Some(layout.clone())
        }
        Rebuild::Refused(why) => {
            findings.push(Finding::new(
                Severity::Damage,
                file,
                format!("{reason}; it cannot be rebuilt from the journals ({why}): restore it from a backup"),
            ));
            None
        }
    };
    Ok(LayoutExamination {
        status,
        effective,
        rebuild: Some(rebuild),
        findings,
    })
}

/// The layout the journals name, or why they do not name one. `random`
/// gives the id of a journal that was never written.
pub(super) fn rebuild(
    options: &CheckOptions,
    streams: &[(String, Option<u64>)],
    mut random: impl FnMut() -> u64,
) -> Result<Rebuild, CheckError> {
    let journal_dir = &options.journal_dir;
    let refused = |why: String| Ok(Rebuild::Refused(why));
    if options.journal_device {
        // The device header records the layout itself: each shard's
        // journal id, in shard order.
        let device = tern_storage::journal_device::JournalDevice::open(journal_dir)?;
        return match device.contents_unchanged() {
            Ok(tern_storage::journal_device::Contents::Tern { header, .. }) => {
                Ok(Rebuild::Unambiguous {
                    layout: Layout {
                        shard_count: header.shard_count(),
                        journal_ids: header.journal_ids,
                    },
                    notes: vec![format!(
                        "the shard count and journal ids are the journal device {}'s header's",
                        journal_dir.display()
                    )],
                })
            }
            Ok(tern_storage::journal_device::Contents::Empty) => refused(format!(
                "the journal device {} has no tern journal header: the shard count cannot be told",
                journal_dir.display()
            )),
            Err(error) => refused(format!("{error}")),
        };
    }
    let shards: BTreeSet<usize> = match std::fs::read_dir(journal_dir) {
        Ok(entries) => entries
            .filter_map(|entry| entry.ok())
            .filter(|entry| entry.path().is_dir())
            .filter_map(|entry| {
                let name = entry.file_name().to_string_lossy().into_owned();
                let index = name.strip_prefix("shard-")?;
                // Exactly the names tern creates (no sign, no leading zero).
                index
                    .parse::<usize>()
                    .ok()
                    .filter(|shard| shard.to_string() == index)
            })
            .collect(),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => BTreeSet::new(),
        Err(error) => return Err(io_error(journal_dir)(error)),
    };
    if shards.is_empty() {
        return refused(format!(
            "no shard-<i> directory under {}: the shard count cannot be told",
            journal_dir.display()
        ));
    }
    let shard_count = shards.len();
    if shards.iter().copied().ne(0..shard_count) {
        return refused(format!(
            "the shard directories {shards:?} do not run from 0 without a gap"
        ));
    }
    let mut journal_ids = Vec::with_capacity(shard_count);
    let mut notes = Vec::new();
    for shard in 0..shard_count {
        let directory = journal_directory(journal_dir, shard);
        match journal_id(options, &directory, shard)? {
            JournalId::Named(id) => journal_ids.push(id),
            JournalId::NeverWritten => {
                let id = store_layout::journal_id(&mut random);
                notes.push(format!("shard-{shard} was never written: a new journal id"));
                journal_ids.push(id);
            }
            JournalId::Ambiguous(why) => return refused(why),
        }
    }
    let layout = Layout {
        shard_count,
        journal_ids,
    };
    if let Some(why) = misplaced_stream(options, &layout, streams)? {
        return refused(why);
    }
    Ok(Rebuild::Unambiguous { layout, notes })
}

enum JournalId {
    Named(u64),
    NeverWritten,
    Ambiguous(String),
}

/// The id the segments of one journal directory carry.
fn journal_id(
    options: &CheckOptions,
    directory: &Path,
    shard: usize,
) -> Result<JournalId, CheckError> {
    let mut ids = BTreeSet::new();
    let mut unnamed_data = false;
    for segment in 0..options.journal_segments {
        let path = segment_path(directory, segment);
        let file = match std::fs::File::open(&path) {
            Ok(file) => file,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => continue,
            Err(error) => return Err(io_error(&path)(error)),
        };
        let mut head = vec![0u8; 2 * BLOCK_BYTES];
        let read = read_fully_at(&file, &mut head, 0).map_err(io_error(&path))?;
        head[read..].fill(0);
        let mut named = false;
        if let Some(header) = SegmentHeader::decode(&head[..BLOCK_BYTES]) {
            if header.shard as usize != shard {
                return Ok(JournalId::Ambiguous(format!(
                    "{} carries shard {} but is in shard-{shard}",
                    path.display(),
                    header.shard
                )));
            }
            ids.insert(header.journal_id);
            named = true;
        }
        if let Some(batch) =
            BatchHeader::decode(&head[BLOCK_BYTES..BLOCK_BYTES + BATCH_HEADER_BYTES])
                .filter(|batch| !batch.footer && batch.offset == BLOCK_BYTES as u64)
        {
            ids.insert(batch.journal_id);
            named = true;
        }
        if !named && !all_zero(&file).map_err(io_error(&path))? {
            unnamed_data = true;
        }
    }
    Ok(match ids.len() {
        1 => JournalId::Named(*ids.first().expect("one")),
        0 if unnamed_data => JournalId::Ambiguous(format!(
            "{} holds data but no verified segment header or first batch names its journal id",
            directory.display()
        )),
        0 => JournalId::NeverWritten,
        _ => JournalId::Ambiguous(format!(
            "the segments of {} carry different journal ids: {}",
            directory.display(),
            ids.iter()
                .map(|id| format!("{id:016x}"))
                .collect::<Vec<_>>()
                .join(", ")
        )),
    })
}

fn read_fully_at(file: &std::fs::File, buffer: &mut [u8], offset: u64) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buffer.len() {
        match file.read_at(&mut buffer[filled..], offset + filled as u64)? {
            0 => break,
            read => filled += read,
        }
    }
    Ok(filled)
}

fn all_zero(file: &std::fs::File) -> std::io::Result<bool> {
    let mut buffer = vec![0u8; READ_CHUNK_BYTES];
    let mut offset = 0;
    loop {
        let read = read_fully_at(file, &mut buffer, offset)?;
        if buffer[..read].iter().any(|&byte| byte != 0) {
            return Ok(false);
        }
        if read < buffer.len() {
            return Ok(true);
        }
        offset += read as u64;
    }
}

/// A stream whose records are in one journal but which the layout's
/// shard count places on another: the count is not the one that wrote
/// the data.
fn misplaced_stream(
    options: &CheckOptions,
    layout: &Layout,
    streams: &[(String, Option<u64>)],
) -> Result<Option<String>, CheckError> {
    let names: BTreeMap<u64, &str> = streams
        .iter()
        .filter_map(|(name, group)| group.map(|group| (group, name.as_str())))
        .collect();
    for shard in 0..layout.shard_count {
        let directory = journal_directory(&options.journal_dir, shard);
        let journal_id = layout.journal_ids[shard];
        let mut found = BTreeSet::new();
        for segment in 0..options.journal_segments {
            let path = segment_path(&directory, segment);
            let file = match std::fs::File::open(&path) {
                Ok(file) => file,
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => continue,
                Err(error) => return Err(io_error(&path)(error)),
            };
            // A segment is at most its configured size (a longer file's
            // tail is not part of it).
            let mut image = vec![0u8; options.journal_segment_bytes as usize];
            let read = read_fully_at(&file, &mut image, 0).map_err(io_error(&path))?;
            image.truncate(read);
            if image.len() < 2 * BLOCK_BYTES {
                continue;
            }
            let generation = SegmentHeader::decode(&image[..BLOCK_BYTES])
                .map(|header| header.generation)
                .or_else(|| {
                    BatchHeader::decode(&image[BLOCK_BYTES..BLOCK_BYTES + BATCH_HEADER_BYTES])
                        .map(|batch| batch.generation)
                });
            if let Some(generation) = generation {
                scan_batches(&image, BLOCK_BYTES, generation, journal_id, |record| {
                    found.insert(record.header.group);
                });
            }
        }
        for group in found {
            let Some(name) = names.get(&group) else {
                continue;
            };
            let owner = owner_of(name, layout.shard_count);
            if owner != shard {
                return Ok(Some(format!(
                    "stream {name}'s records are in shard-{shard}'s journal, but with {} shard(s) it would live on shard {owner}",
                    layout.shard_count
                )));
            }
        }
    }
    Ok(None)
}

/// `tern storage repair --layout`.
pub(super) async fn repair(
    options: &CheckOptions,
    confirm: bool,
) -> Result<RepairReport, CheckError> {
    let target = RepairTarget::Layout.describe();
    let (streams, _) = super::stream::examine_all(options).await?;
    let groups: Vec<(String, Option<u64>)> = streams
        .iter()
        .map(|stream| (stream.name.clone(), stream.group()))
        .collect();
    let examination = examine(options, &groups)?;
    let (layout, notes) = match (examination.status, examination.rebuild) {
        (LayoutStatus::Ok, _) => {
            return Ok(RepairReport::refused(
                target,
                "the layout is valid: a rebuild is never written over it",
            ))
        }
        (LayoutStatus::Absent, _) => {
            return Ok(RepairReport::plan(
                target,
                Vec::new(),
                vec!["no JetStream data: the server creates the layout at its next start".into()],
            ))
        }
        (LayoutStatus::OldFormat, _) => {
            return Ok(RepairReport::refused(
                target,
                "the layout is of store format 1: start the earlier tern on it, or move the data away",
            ))
        }
        (_, Some(Rebuild::Refused(why))) => {
            return Ok(RepairReport::refused(
                target,
                format!("the journals do not name the layout unambiguously: {why}; restore it from a backup"),
            ))
        }
        (_, None) => unreachable!("a missing or damaged layout is examined for a rebuild"),
        (_, Some(Rebuild::Unambiguous { layout, notes })) => (layout, notes),
    };
    let root = options.jetstream_root();
    let action = Action {
        file: options.relative(&root.join("layout")),
        change: format!("write it: {}", describe(&layout)),
        discards: Vec::new(),
    };
    let mut report = RepairReport::plan(target, vec![action], notes);
    if !confirm {
        return Ok(report);
    }
    // Checked again just before: never over a valid layout.
    if let Ok(Some(_)) = store_layout::read(
        &options.store_dir,
        &options.journal_dir,
        options.journal_segments,
    ) {
        return Ok(RepairReport::refused(
            report.target,
            "the layout became valid meanwhile: nothing written",
        ));
    }
    store_layout::write(&root, &layout)?;
    report.applied = true;
    Ok(report)
}
