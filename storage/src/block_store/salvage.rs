//! What an operator's repair of a damaged block store keeps: the largest
//! manifest that still opens. Never run by the broker on its own (a
//! checkpoint's manifest is the truth, and damage keeps a stream offline);
//! `tern storage repair` runs it with explicit confirmation, after
//! `tern storage check` reported the same losses.
//!
//! Salvage repeats [`StreamLog::verify`] (the very checks `open` makes) and,
//! each time it names damage, shrinks the manifest at it: a segment whose
//! record at offset `o` fails keeps only its records before `o`; a missing
//! segment, or one whose records verify but are not the checkpointed ones,
//! is dropped; a deletes log keeps the entries before the damaged one. Each
//! step shrinks the manifest, so it ends; what it took is reported as
//! [`Loss`]es, with the sequences they held where the manifest knows them.

use crate::block_store::manifest::{
    digest_append, parse_deletes_file_name, parse_segment_file_name, Manifest, SegmentExtent,
    DIGEST_EMPTY,
};
use crate::block_store::record;
use crate::block_store::stream::{StoreError, StreamConfig, StreamLog};
use crate::block_store::{StoreFile, StoreFiles};
use crate::format::{align_up, BLOCK_BYTES};

/// Something a salvage gives up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Loss {
    /// Messages of a segment: `records` of them, sequences
    /// `first_sequence..=last_sequence` (some may have been deleted).
    Messages {
        file: String,
        /// Where the damage was found in `file` (0 for a missing file).
        offset: u64,
        records: u64,
        first_sequence: u64,
        last_sequence: u64,
        reason: String,
    },
    /// Delete entries that cannot be read: the messages they deleted (not
    /// known) would be served again.
    Deletes {
        file: String,
        /// Where the damage was found in `file` (0 for a missing file).
        offset: u64,
        entries: u64,
        reason: String,
    },
}

/// The manifest a repair would store, and what it gives up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Salvage {
    pub manifest: Manifest,
    pub losses: Vec<Loss>,
}

/// Works out what of `files` still opens under (a shrunk) `manifest`.
/// Changes nothing; `Ok` with no losses means the store is intact.
pub async fn salvage<S: StoreFiles + Clone>(
    files: &S,
    config: &StreamConfig,
    manifest: &Manifest,
) -> Result<Salvage, StoreError> {
    let mut manifest = manifest.clone();
    let mut losses = Vec::new();
    // Each round removes at least one record or delete entry, or a whole
    // segment: bounded by what the manifest holds.
    let rounds_max = 2
        + manifest.segments.len() as u64 * 2
        + manifest
            .segments
            .iter()
            .map(|segment| segment.records)
            .sum::<u64>()
        + manifest.deletes.entries;
    for _ in 0..rounds_max {
        let error = match StreamLog::verify(files.clone(), config.clone(), &manifest).await {
            Ok(_) => return Ok(Salvage { manifest, losses }),
            Err(error) => error,
        };
        let StoreError::Corrupt {
            file,
            offset,
            reason,
        } = &error
        else {
            return Err(error);
        };
        if let Some((first_sequence, version)) = parse_segment_file_name(file) {
            let position = manifest
                .segments
                .iter()
                .position(|extent| {
                    extent.first_sequence == first_sequence && extent.version == version
                })
                .ok_or_else(|| error.clone())?;
            let old = manifest.segments[position];
            let kept = prefix_before(files, &old, *offset).await?;
            let kept = kept.filter(|kept| kept.records < old.records);
            let (first_lost, records_lost) = match &kept {
                Some(kept) => (kept.last_record_sequence + 1, old.records - kept.records),
                None => (old.first_sequence, old.records),
            };
            losses.push(Loss::Messages {
                file: file.clone(),
                offset: *offset,
                records: records_lost,
                first_sequence: first_lost,
                last_sequence: old.last_record_sequence,
                reason: reason.clone(),
            });
            match kept {
                Some(kept) => manifest.segments[position] = kept,
                None => {
                    manifest.segments.remove(position);
                }
            }
        } else if parse_deletes_file_name(file) == Some(manifest.deletes.version) {
            let kept = (*offset / 16).min(manifest.deletes.entries.saturating_sub(1));
            losses.push(Loss::Deletes {
                file: file.clone(),
                offset: *offset,
                entries: manifest.deletes.entries - kept,
                reason: reason.clone(),
            });
            manifest.deletes.entries = kept;
        } else {
            return Err(error);
        }
        manifest.check().map_err(StoreError::Manifest)?;
    }
    unreachable!("each salvage round shrinks the manifest")
}

/// The extent of `extent`'s records that lie whole before `offset` (and
/// before the end of its file), verified, with their count, last sequence
/// and digest; `None` when there are none.
async fn prefix_before<S: StoreFiles>(
    files: &S,
    extent: &SegmentExtent,
    offset: u64,
) -> Result<Option<SegmentExtent>, StoreError> {
    let name = extent.file_name();
    if !files.names().contains(&name) {
        return Ok(None);
    }
    let file = files.open(&name).await.map_err(StoreError::Io)?;
    let end = offset.min(extent.bytes).min(file.size()) as usize;
    let read = file
        .read(0, align_up(end.max(1), BLOCK_BYTES))
        .await
        .map_err(StoreError::Io)?;
    let bytes = &read.as_ref()[..end.min(read.as_ref().len())];
    let mut kept = SegmentExtent {
        bytes: 0,
        records: 0,
        last_record_sequence: 0,
        digest: DIGEST_EMPTY,
        ..*extent
    };
    let mut position = 0;
    while position < bytes.len() {
        let Ok(view) = record::decode(&bytes[position..]) else {
            break;
        };
        if view.sequence <= kept.last_record_sequence
            || view.sequence < extent.first_sequence
            || view.sequence > extent.last_record_sequence
        {
            break;
        }
        kept.records += 1;
        kept.last_record_sequence = view.sequence;
        kept.digest = digest_append(kept.digest, view.checksum);
        position += view.stored_bytes;
        kept.bytes = position as u64;
    }
    Ok((kept.records > 0).then_some(kept))
}

#[cfg(test)]
mod tests {
    use futures_lite::future::block_on;

    use super::*;
    use crate::block_store::{MemoryFiles, NewMessage};

    fn config() -> StreamConfig {
        StreamConfig {
            segment_bytes_max: 8 * 1024,
            write_buffer_bytes: 8 * 1024,
            tail_cache_bytes: 0,
            sync: true,
            read_chunk_bytes: 8 * 1024,
            ..StreamConfig::default()
        }
    }

    /// 40 messages of ~500 bytes over several segments, 7 and 33 deleted,
    /// checkpointed: the files, the manifest, each segment's sequences.
    fn checkpointed() -> (MemoryFiles, Manifest) {
        let files = MemoryFiles::new();
        let (mut log, _) =
            block_on(StreamLog::open(files.clone(), config(), &Manifest::new(1))).unwrap();
        for sequence in 1..=40u64 {
            let payload = vec![sequence as u8; 500];
            block_on(log.append(NewMessage {
                sequence,
                timestamp_ns: sequence,
                subject: b"salvage.a",
                headers: b"",
                payload: &payload,
            }))
            .unwrap();
        }
        log.delete(7);
        log.delete(33);
        let manifest = block_on(log.sync()).unwrap();
        assert!(manifest.segments.len() >= 3, "{manifest:?}");
        (files.crash(1), manifest)
    }

    fn served(files: &MemoryFiles, manifest: &Manifest) -> Vec<u64> {
        let (log, _) = block_on(StreamLog::open(files.clone(), config(), manifest)).unwrap();
        let mut sequences = Vec::new();
        block_on(log.replay(0, |view| sequences.push(view.sequence))).unwrap();
        sequences
    }

    #[test]
    fn an_intact_store_loses_nothing() {
        let (files, manifest) = checkpointed();
        let salvage = block_on(salvage(&files, &config(), &manifest)).unwrap();
        assert_eq!(
            salvage,
            Salvage {
                manifest,
                losses: Vec::new()
            }
        );
    }

    #[test]
    fn a_damaged_record_keeps_the_records_before_it_and_every_other_segment() {
        let (files, manifest) = checkpointed();
        let middle = &manifest.segments[1];
        let name = middle.file_name();
        // The third record of the middle segment (records are ~544 bytes).
        files.flip_bit(&name, 2 * 544 + 100, 2 * 544 + 101, 3);
        let salvage = block_on(salvage(&files, &config(), &manifest)).unwrap();
        let third = middle.first_sequence + 2;
        assert_eq!(
            salvage.losses,
            vec![Loss::Messages {
                file: name.clone(),
                // The damaged record's own offset: the third one.
                offset: 2 * record::stored_bytes("salvage.a".len(), 0, 500) as u64,
                records: middle.records - 2,
                first_sequence: third,
                last_sequence: middle.last_record_sequence,
                reason: salvage_reason(&salvage.losses[0]),
            }]
        );
        let expected: Vec<u64> = (1..=40)
            .filter(|sequence| ![7, 33].contains(sequence))
            .filter(|sequence| !(third..=middle.last_record_sequence).contains(sequence))
            .collect();
        assert_eq!(served(&files, &salvage.manifest), expected);
    }

    #[test]
    fn a_missing_segment_is_given_up_whole_and_named() {
        let (files, manifest) = checkpointed();
        let last = *manifest.segments.last().unwrap();
        block_on(files.remove(&last.file_name())).unwrap();
        let salvage = block_on(salvage(&files, &config(), &manifest)).unwrap();
        match &salvage.losses[..] {
            [Loss::Messages {
                file,
                records,
                first_sequence,
                last_sequence,
                ..
            }] => {
                assert_eq!(file, &last.file_name());
                assert_eq!(
                    (*records, *first_sequence, *last_sequence),
                    (last.records, last.first_sequence, 40)
                );
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            served(&files, &salvage.manifest).last(),
            Some(&(last.first_sequence - 1))
        );
    }

    #[test]
    fn a_damaged_delete_entry_is_reported_as_deletes_lost() {
        let (files, manifest) = checkpointed();
        files.flip_bit("deletes.log", 16, 24, 5);
        let salvage = block_on(salvage(&files, &config(), &manifest)).unwrap();
        assert!(
            matches!(&salvage.losses[..], [Loss::Deletes { entries: 1, .. }]),
            "{:?}",
            salvage.losses
        );
        // The second delete (33) is lost: that message is served again.
        assert!(served(&files, &salvage.manifest).contains(&33));
        assert!(!served(&files, &salvage.manifest).contains(&7));
    }

    fn salvage_reason(loss: &Loss) -> String {
        match loss {
            Loss::Messages { reason, .. } | Loss::Deletes { reason, .. } => reason.clone(),
        }
    }
}
