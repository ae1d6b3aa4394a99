//! Tests of `tern storage check` and `repair` on stores built here with the
//! server's own formats (layout, journal, stream files, block store): a
//! check changes nothing; a plan-only repair changes nothing; each repair
//! leaves a store the check finds intact; the raft rebuild's applied
//! index; the layout rebuild's refusals.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use bytes::Bytes;
use tern_storage::block_store::{DmaFiles, NewMessage, StreamLog};
use tern_storage::dma::{segment_path, DmaDevice, SyncMethod};
use tern_storage::format::{checksum, BatchHeader, SegmentHeader, BATCH_HEADER_BYTES, BLOCK_BYTES};
use tern_storage::{Journal, JournalConfig, NewRecord, SyncPolicy};

use super::layout::{rebuild, Rebuild};
use super::report::{Discard, Severity};
use super::stream::rebuilt_applied_index;
use super::*;
use crate::jetstream::consumer::store::{self as consumer_store, StoredConsumers};
use crate::jetstream::entry::{self, Operation};
use crate::jetstream::layout::{self as store_layout, journal_directory, Layout};
use crate::jetstream::persist::{self, RaftState};

const STREAM: &str = "ORDERS";
const GROUP: u64 = 0x77;
const MESSAGES: u64 = 20;
/// The journal still holds the entries from this index on (the ones
/// before were recycled after a checkpoint).
const JOURNAL_FIRST_INDEX: u64 = 5;
const ENTRY_TERM: u64 = 2;
const HARD_STATE_TERM: u64 = 3;
const SEGMENT_BYTES: u64 = 1 << 20;
const SEGMENTS: u32 = 2;

fn options(store: &Path) -> CheckOptions {
    CheckOptions {
        store_dir: store.to_path_buf(),
        journal_dir: store.join("jetstream").join("journal"),
        journal_segment_bytes: SEGMENT_BYTES,
        journal_segments: SEGMENTS,
        sync: SyncPolicy::Always,
        journal_device: false,
    }
}

fn payload(sequence: u64) -> Vec<u8> {
    // The same length for every sequence: records are at multiples of one size.
    format!("message {sequence:04} ").repeat(20).into_bytes()
}

fn stream_directory(store: &Path) -> PathBuf {
    store.join("jetstream").join("streams").join(STREAM)
}

fn segment(store: &Path) -> PathBuf {
    segment_path(&journal_directory(&store.join("jetstream/journal"), 0), 0)
}

/// A one-shard store as the server leaves it after a checkpoint of
/// messages 1..=20 (entry `i` stores message `i`), the journal holding
/// entries 5..=20 (one batch each) and a hard state of term 3, and an
/// (empty) consumers file the checkpoint references.
fn build_store(store: &Path) {
    let options = options(store);
    let layout = store_layout::open(store, &options.journal_dir, SEGMENTS, 1, || 0x1234).unwrap();
    let journal_id = layout.journal_ids[0];
    run(async move {
        let directory = journal_directory(&options.journal_dir, 0);
        let device =
            DmaDevice::open_directory(&directory, SEGMENTS, SEGMENT_BYTES, SyncMethod::Fdatasync)
                .await?;
        let config = JournalConfig {
            shard: 0,
            batch_bytes_max: 64 << 10,
            sync: SyncPolicy::Always,
            journal_id,
            formatted_before: false,
        };
        let (journal, _) = Journal::open(device, config, |_| {}).await.unwrap();
        store_layout::record_formatted(&options.store_dir.join("jetstream"), 0, journal_id)
            .unwrap();
        for index in JOURNAL_FIRST_INDEX..=MESSAGES {
            let body = Operation::Message {
                sequence: index,
                timestamp_ns: 1_000 + index,
                subject: Bytes::from_static(b"orders.new"),
                headers: Bytes::new(),
                payload: Bytes::from(payload(index)),
                retained: true,
            }
            .encode();
            journal
                .try_append(NewRecord {
                    kind: entry::RECORD_ENTRY_NORMAL,
                    group: GROUP,
                    term: ENTRY_TERM,
                    index,
                    body: &body,
                })
                .unwrap();
            journal.flush().await.unwrap();
        }
        let hard_state = entry::encode_hard_state(&tern_raft::HardState {
            term: HARD_STATE_TERM,
            vote: Some(1),
        });
        journal
            .try_append(NewRecord {
                kind: entry::RECORD_HARD_STATE,
                group: GROUP,
                term: HARD_STATE_TERM,
                index: 0,
                body: &hard_state,
            })
            .unwrap();
        journal.flush().await.unwrap();

        let stream = stream_directory(&options.store_dir);
        let files = DmaFiles::open(&stream).await?;
        let config = super::super::stream::config::parse(
            STREAM,
            br#"{"name":"ORDERS","subjects":["orders.>"]}"#,
            true,
        )
        .unwrap();
        let stored = format!(
            "{{\"group\":{GROUP},\"config\":{}}}",
            config.to_stored_json()
        );
        persist::write_config(&files, stored.as_bytes(), 1)
            .await
            .unwrap();
        let messages = DmaFiles::open(&stream.join("messages")).await?;
        let (mut log, _) = StreamLog::open(
            messages,
            stream::block_store_config(),
            &tern_storage::block_store::Manifest::new(1),
        )
        .await
        .unwrap();
        for sequence in 1..=MESSAGES {
            log.append(NewMessage {
                sequence,
                timestamp_ns: 1_000 + sequence,
                subject: b"orders.new",
                headers: b"",
                payload: &payload(sequence),
            })
            .await
            .unwrap();
        }
        let manifest = log.sync().await.unwrap();
        let consumers = StoredConsumers {
            applied_index: MESSAGES,
            consumers: Vec::new(),
        };
        let consumers_checksum = consumer_store::write(&files, &consumers).await.unwrap();
        persist::write_raft(
            &files,
            &RaftState {
                term: ENTRY_TERM,
                vote: 1,
                applied_index: MESSAGES,
                applied_term: ENTRY_TERM,
                last_unix_ns: 1_000 + MESSAGES,
                consumers: Some(persist::ConsumersReference {
                    applied_index: MESSAGES,
                    checksum: consumers_checksum,
                }),
                manifest,
                generation: 0,
            },
        )
        .await
        .unwrap();
        Ok(())
    })
    .unwrap();
}

/// Every file and directory under `root`: kind, size, mtime and, for
/// files, a checksum of the contents.
fn snapshot(root: &Path) -> BTreeMap<PathBuf, (bool, u64, SystemTime, u32)> {
    let mut entries = BTreeMap::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(directory) = pending.pop() {
        let meta = std::fs::metadata(&directory).unwrap();
        entries.insert(directory.clone(), (true, 0, meta.modified().unwrap(), 0));
        for entry in std::fs::read_dir(&directory).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.is_dir() {
                pending.push(path);
            } else {
                let contents = std::fs::read(&path).unwrap();
                entries.insert(
                    path,
                    (
                        false,
                        meta.len(),
                        meta.modified().unwrap(),
                        checksum(&contents),
                    ),
                );
            }
        }
    }
    entries
}

fn damage_findings(report: &StoreReport) -> Vec<&report::Finding> {
    report
        .findings
        .iter()
        .filter(|finding| finding.severity == Severity::Damage)
        .collect()
}

fn flip_block_store_record(store: &Path) {
    let path = stream_directory(store).join("messages/00000000000000000001.blk");
    let mut bytes = std::fs::read(&path).unwrap();
    let record = tern_storage::block_store::record::stored_bytes(10, 0, payload(1).len());
    // Inside the 11th record (sequence 11).
    bytes[10 * record + 60] ^= 1;
    std::fs::write(&path, bytes).unwrap();
}

#[test]
fn an_intact_store_checks_as_intact() {
    let directory = tempfile::tempdir().unwrap();
    build_store(directory.path());
    let report = check(&options(directory.path())).unwrap();
    assert!(!report.damaged(), "{:#?}", report.findings);
    assert_eq!(report.shard_count, Some(1));
    assert_eq!(report.streams.len(), 1);
    assert_eq!(report.streams[0].shard, Some(0));
    assert_eq!(
        report.journals[0].records,
        MESSAGES - JOURNAL_FIRST_INDEX + 2
    );
}

/// A cluster node's identity file: intact, it is named (a note); damaged,
/// it is damage the server would refuse to start on, and the check
/// changes nothing.
#[test]
fn a_damaged_node_identity_is_damage() {
    let directory = tempfile::tempdir().unwrap();
    build_store(directory.path());
    let root = directory.path().join("jetstream");
    let store = crate::jetstream::identity::Store {
        root: &root,
        holds_data: false,
        checkpoint_node: None,
    };
    crate::jetstream::identity::open(&store, "n1", || 0xabc).unwrap();
    let report = check(&options(directory.path())).unwrap();
    assert!(!report.damaged(), "{:#?}", report.findings);
    assert!(report
        .findings
        .iter()
        .any(|finding| finding.file == "jetstream/node"
            && finding.reason.contains("0000000000000abc")));
    let path = root.join(crate::jetstream::identity::FILE);
    let damaged = std::fs::read_to_string(&path)
        .unwrap()
        .replace("abc", "abd");
    std::fs::write(&path, &damaged).unwrap();
    let report = check(&options(directory.path())).unwrap();
    let found = damage_findings(&report);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!(found[0].file, "jetstream/node");
    assert!(
        found[0].reason.contains("checksum mismatch"),
        "{}",
        found[0].reason
    );
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        damaged,
        "unchanged"
    );
}

#[test]
fn check_changes_nothing_intact_or_damaged() {
    let directory = tempfile::tempdir().unwrap();
    let store = directory.path();
    build_store(store);
    let before = snapshot(store);
    check(&options(store)).unwrap();
    assert_eq!(snapshot(store), before, "an intact store");
    // Damage everywhere at once: a flipped record, the consumers file, a
    // journal segment shortened, then (second round) the raft file and the
    // layout gone.
    flip_block_store_record(store);
    std::fs::remove_file(stream_directory(store).join("consumers")).unwrap();
    let shortened = segment_path(&journal_directory(&store.join("jetstream/journal"), 0), 1);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&shortened)
        .unwrap()
        .set_len(SEGMENT_BYTES / 2)
        .unwrap();
    let before = snapshot(store);
    let report = check(&options(store)).unwrap();
    assert_eq!(snapshot(store), before, "a damaged store");
    let damaged: Vec<String> = damage_findings(&report)
        .iter()
        .map(|finding| finding.file.clone())
        .collect();
    assert_eq!(
        damaged,
        [
            "jetstream/streams/ORDERS/consumers",
            "jetstream/streams/ORDERS/messages/00000000000000000001.blk",
            "jetstream/journal/shard-0/journal-000001.seg",
        ],
        "{report:#?}"
    );
    std::fs::remove_file(stream_directory(store).join("raft")).unwrap();
    std::fs::remove_file(store.join("jetstream/layout")).unwrap();
    let before = snapshot(store);
    let report = check(&options(store)).unwrap();
    assert_eq!(
        snapshot(store),
        before,
        "a store without raft file and layout"
    );
    assert_eq!(report.layout, report::LayoutStatus::MissingBesideData);
    assert_eq!(report.shard_count, Some(1), "from the journals");
}

#[test]
fn a_flipped_record_is_salvaged_and_named() {
    let directory = tempfile::tempdir().unwrap();
    let store = directory.path();
    build_store(store);
    flip_block_store_record(store);
    let report = check(&options(store)).unwrap();
    let damage = damage_findings(&report);
    assert_eq!(damage.len(), 1, "{report:#?}");
    let record = tern_storage::block_store::record::stored_bytes(10, 0, payload(1).len());
    assert_eq!(damage[0].offset, Some(10 * record as u64));
    assert_eq!(
        damage[0].discards,
        [Discard::Messages {
            stream: STREAM.into(),
            first_sequence: 11,
            last_sequence: MESSAGES,
            messages: MESSAGES - 10,
            note: None,
        }]
    );
    assert!(
        damage[0]
            .to_string()
            .contains("sequences 11..=20 (10 messages) of stream ORDERS"),
        "{}",
        damage[0]
    );
    let target = RepairTarget::Stream(STREAM.into());
    let applied = repair(&options(store), &target, true).unwrap();
    assert!(applied.applied, "{applied:#?}");
    assert!(!check(&options(store)).unwrap().damaged());
    let raft = persist::decode_raft(&std::fs::read(stream_directory(store).join("raft")).unwrap())
        .unwrap();
    assert_eq!(raft.manifest.segments[0].records, 10);
    assert_eq!(raft.applied_index, MESSAGES, "every other field kept");
    assert!(raft.consumers.is_some());
}

#[test]
fn plan_only_repairs_change_nothing() {
    let directory = tempfile::tempdir().unwrap();
    let store = directory.path();
    build_store(store);
    flip_block_store_record(store);
    std::fs::remove_file(stream_directory(store).join("consumers")).unwrap();
    std::fs::remove_file(segment_path(
        &journal_directory(&store.join("jetstream/journal"), 0),
        1,
    ))
    .unwrap();
    let before = snapshot(store);
    for target in [
        RepairTarget::Stream(STREAM.into()),
        RepairTarget::Journal(0),
        RepairTarget::Layout,
    ] {
        let plan = repair(&options(store), &target, false).unwrap();
        assert!(!plan.applied, "{plan:#?}");
        assert_eq!(snapshot(store), before, "{target:?}");
        match target {
            RepairTarget::Layout => assert!(plan.refused.is_some(), "valid layout: {plan:#?}"),
            _ => assert!(!plan.actions.is_empty(), "{target:?}: {plan:#?}"),
        }
    }
    // Then carried out, they leave a store the check finds intact.
    for target in [
        RepairTarget::Stream(STREAM.into()),
        RepairTarget::Journal(0),
    ] {
        assert!(repair(&options(store), &target, true).unwrap().applied);
    }
    let report = check(&options(store)).unwrap();
    assert!(!report.damaged(), "{:#?}", report.findings);
    let raft = persist::decode_raft(&std::fs::read(stream_directory(store).join("raft")).unwrap())
        .unwrap();
    assert_eq!(
        raft.consumers, None,
        "the lost consumers file's reference is cleared"
    );
}

#[test]
fn the_applied_index_of_a_rebuilt_raft_file() {
    // Everything the journal holds of the stream is replayed.
    assert_eq!(rebuilt_applied_index(Some(5), Some(20)), 4);
    assert_eq!(rebuilt_applied_index(Some(1), None), 0);
    // Nothing in the journal: the consumers file's index, else 0.
    assert_eq!(rebuilt_applied_index(None, Some(20)), 20);
    assert_eq!(rebuilt_applied_index(None, None), 0);

    let directory = tempfile::tempdir().unwrap();
    let store = directory.path();
    build_store(store);
    let raft_path = stream_directory(store).join("raft");
    let original = persist::decode_raft(&std::fs::read(&raft_path).unwrap()).unwrap();
    std::fs::remove_file(&raft_path).unwrap();
    let report = check(&options(store)).unwrap();
    let damage = damage_findings(&report);
    assert_eq!(damage.len(), 1, "{report:#?}");
    assert_eq!(damage[0].file, "jetstream/streams/ORDERS/raft");
    assert!(
        damage[0].to_string().contains("purge floor"),
        "{}",
        damage[0]
    );
    let target = RepairTarget::Stream(STREAM.into());
    assert!(repair(&options(store), &target, true).unwrap().applied);
    let rebuilt = persist::decode_raft(&std::fs::read(&raft_path).unwrap()).unwrap();
    assert_eq!(rebuilt.applied_index, JOURNAL_FIRST_INDEX - 1);
    assert_eq!(rebuilt.applied_term, ENTRY_TERM);
    assert_eq!(
        rebuilt.term, HARD_STATE_TERM,
        "the highest term the journal holds"
    );
    assert_eq!(rebuilt.manifest.floor, 1);
    assert_eq!(rebuilt.manifest.last_sequence, MESSAGES);
    assert_eq!(rebuilt.manifest.segments, original.manifest.segments);
    assert_eq!(
        rebuilt.consumers, original.consumers,
        "the consumers file is kept"
    );
    assert_eq!(rebuilt.last_unix_ns, 1_000 + MESSAGES);
    assert!(!check(&options(store)).unwrap().damaged());
}

#[test]
fn a_damaged_journal_batch_is_cut_and_what_follows_listed() {
    let directory = tempfile::tempdir().unwrap();
    let store = directory.path();
    build_store(store);
    // The batches (one record each) of segment 0: zero the 6th (entry 10)
    // whole, header and parity.
    let path = segment(store);
    let mut bytes = std::fs::read(&path).unwrap();
    let mut offset = BLOCK_BYTES;
    let mut batches = Vec::new();
    while let Some(batch) = BatchHeader::decode(&bytes[offset..offset + BATCH_HEADER_BYTES]) {
        batches.push((offset, batch.batch_bytes as usize));
        offset += batch.batch_bytes as usize;
    }
    let (victim, victim_bytes) = batches[5];
    bytes[victim..victim + victim_bytes].fill(0);
    std::fs::write(&path, &bytes).unwrap();
    // The checkpoint covers everything: nothing is lost from the stream,
    // and the check says so (no entry past applied index 20 is cut).
    let report = check(&options(store)).unwrap();
    let damage = damage_findings(&report);
    assert_eq!(damage.len(), 1, "{report:#?}");
    assert_eq!(damage[0].offset, Some(victim as u64));
    assert!(damage[0]
        .discards
        .iter()
        .all(|discard| matches!(discard, Discard::Other { .. })));
    // With the checkpoint behind (applied index 7), the entries after it
    // that the cut takes are listed: 10 in the damaged batch, 11..=20 read.
    let raft_path = stream_directory(store).join("raft");
    let mut raft = persist::decode_raft(&std::fs::read(&raft_path).unwrap()).unwrap();
    raft.applied_index = 7;
    raft.manifest.last_sequence = 7;
    raft.manifest.segments.clear();
    raft.consumers = None;
    std::fs::write(&raft_path, persist::encode_raft(&raft)).unwrap();
    std::fs::remove_file(stream_directory(store).join("consumers")).unwrap();
    let report = check(&options(store)).unwrap();
    let damage = damage_findings(&report);
    assert_eq!(damage.len(), 1, "{report:#?}");
    assert_eq!(
        &damage[0].discards[..3],
        [
            Discard::Entries {
                stream: STREAM.into(),
                first_index: 10,
                last_index: MESSAGES,
                entries: MESSAGES - 9,
            },
            Discard::Messages {
                stream: STREAM.into(),
                first_sequence: 10,
                last_sequence: 10,
                messages: 1,
                note: Some("in the damaged batch, which cannot be read".into()),
            },
            Discard::Messages {
                stream: STREAM.into(),
                first_sequence: 11,
                last_sequence: MESSAGES,
                messages: MESSAGES - 10,
                note: None,
            },
        ]
    );
    let before = snapshot(store);
    let target = RepairTarget::Journal(0);
    assert!(!repair(&options(store), &target, false).unwrap().applied);
    assert_eq!(snapshot(store), before);
    assert!(repair(&options(store), &target, true).unwrap().applied);
    let report = check(&options(store)).unwrap();
    assert!(!report.damaged(), "{:#?}", report.findings);
    assert_eq!(report.journals[0].records, 5, "entries 5..=9 are kept");
}

/// A journal zeroed whole reads like a fresh one; the marker the server
/// wrote when it formatted it says otherwise: damage, and the repair
/// removes the marker (the next start formats the journal afresh).
#[test]
fn an_erased_journal_is_damage_and_the_repair_accepts_it() {
    let directory = tempfile::tempdir().unwrap();
    let store = directory.path();
    build_store(store);
    let marker = store_layout::formatted_marker(&store.join("jetstream"), 0);
    assert!(marker.exists());
    // The marker itself deleted or damaged, the journal intact: nothing is
    // lost and nothing is damage (only its existence counts; the server
    // writes it again at its next start).
    std::fs::write(&marker, b"\xff garbage").unwrap();
    assert!(!check(&options(store)).unwrap().damaged());
    std::fs::remove_file(&marker).unwrap();
    assert!(!check(&options(store)).unwrap().damaged());
    store_layout::record_formatted(&store.join("jetstream"), 0, 0x1234).unwrap();
    for segment in 0..SEGMENTS {
        let path = segment_path(
            &journal_directory(&store.join("jetstream/journal"), 0),
            segment,
        );
        std::fs::write(&path, vec![0u8; SEGMENT_BYTES as usize]).unwrap();
    }
    let report = check(&options(store)).unwrap();
    let damage = damage_findings(&report);
    assert_eq!(damage.len(), 1, "{report:#?}");
    assert!(damage[0].reason.contains("erased"), "{:?}", damage[0]);
    let before = snapshot(store);
    let target = RepairTarget::Journal(0);
    let plan = repair(&options(store), &target, false).unwrap();
    assert!(!plan.applied);
    assert_eq!(snapshot(store), before);
    assert!(repair(&options(store), &target, true).unwrap().applied);
    assert!(!marker.exists());
    let report = check(&options(store)).unwrap();
    assert!(!report.damaged(), "{:#?}", report.findings);
}

#[test]
fn what_the_journal_rebuilds_by_itself_is_self_healing() {
    let directory = tempfile::tempdir().unwrap();
    let store = directory.path();
    build_store(store);
    // One damaged block of a batch (its first data block) is rebuilt from
    // the parity block at the next start: not damage.
    let path = segment(store);
    let mut bytes = std::fs::read(&path).unwrap();
    let second = BLOCK_BYTES
        + BatchHeader::decode(&bytes[BLOCK_BYTES..BLOCK_BYTES + BATCH_HEADER_BYTES])
            .unwrap()
            .batch_bytes as usize;
    bytes[second..second + BLOCK_BYTES].fill(0);
    std::fs::write(&path, &bytes).unwrap();
    let before = snapshot(store);
    let report = check(&options(store)).unwrap();
    assert_eq!(snapshot(store), before, "not written back by the check");
    assert!(!report.damaged(), "{:#?}", report.findings);
    let healing: Vec<_> = report
        .findings
        .iter()
        .filter(|finding| finding.severity == Severity::SelfHealing)
        .collect();
    assert_eq!(healing.len(), 1, "{:#?}", report.findings);
    assert_eq!(
        healing[0].file,
        "jetstream/journal/shard-0/journal-000000.seg"
    );
    assert_eq!(healing[0].offset, Some(second as u64));
}

// ----- the layout ------------------------------------------------------------

/// A journal directory whose segment 0 has a verified header naming
/// `journal_id` (and `shard`); segment 1 all zeros.
fn journal_with_header(journal_dir: &Path, shard: usize, journal_id: u64) {
    let directory = journal_directory(journal_dir, shard);
    std::fs::create_dir_all(&directory).unwrap();
    let mut image = vec![0u8; 4 * BLOCK_BYTES];
    SegmentHeader {
        segment_bytes: SEGMENT_BYTES,
        generation: 1,
        first_sequence: 1,
        chain: 0,
        shard: shard as u32,
        journal_id,
        floor_generation: 1,
    }
    .encode(&mut image[..BLOCK_BYTES]);
    std::fs::write(segment_path(&directory, 0), &image).unwrap();
    std::fs::write(segment_path(&directory, 1), vec![0u8; 4 * BLOCK_BYTES]).unwrap();
}

fn refused(outcome: Rebuild) -> String {
    match outcome {
        Rebuild::Refused(why) => why,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn the_layout_is_rebuilt_only_when_the_journals_are_unambiguous() {
    let directory = tempfile::tempdir().unwrap();
    let store = directory.path();
    let options = options(store);
    let journals = &options.journal_dir;
    let never = || 0xfeed;
    // No journal at all: the shard count cannot be told.
    assert!(refused(rebuild(&options, &[], never).unwrap()).contains("shard count"));
    // Unambiguous: every shard's id from its header; shard 1 never written.
    journal_with_header(journals, 0, 0xa);
    let zeros = journal_directory(journals, 1);
    std::fs::create_dir_all(&zeros).unwrap();
    std::fs::write(segment_path(&zeros, 0), vec![0u8; 2 * BLOCK_BYTES]).unwrap();
    match rebuild(&options, &[], never).unwrap() {
        Rebuild::Unambiguous { layout, notes } => {
            assert_eq!(
                layout,
                Layout {
                    shard_count: 2,
                    journal_ids: vec![0xa, 0xfeed],
                }
            );
            assert_eq!(notes.len(), 1, "{notes:?}");
        }
        other => panic!("{other:?}"),
    }
    // Shard 1 holds data no header names.
    std::fs::write(segment_path(&zeros, 0), vec![7u8; 2 * BLOCK_BYTES]).unwrap();
    assert!(refused(rebuild(&options, &[], never).unwrap()).contains("no verified segment header"));
    journal_with_header(journals, 1, 0xb);
    // Two ids in one journal.
    let mut other = vec![0u8; 2 * BLOCK_BYTES];
    SegmentHeader {
        segment_bytes: SEGMENT_BYTES,
        generation: 2,
        first_sequence: 1,
        chain: 0,
        shard: 1,
        journal_id: 0xc,
        floor_generation: 1,
    }
    .encode(&mut other[..BLOCK_BYTES]);
    std::fs::write(segment_path(&journal_directory(journals, 1), 1), &other).unwrap();
    assert!(refused(rebuild(&options, &[], never).unwrap()).contains("different journal ids"));
    journal_with_header(journals, 1, 0xb);
    // A header naming another shard than its directory.
    let mut moved = vec![0u8; 2 * BLOCK_BYTES];
    SegmentHeader {
        segment_bytes: SEGMENT_BYTES,
        generation: 1,
        first_sequence: 1,
        chain: 0,
        shard: 0,
        journal_id: 0xb,
        floor_generation: 1,
    }
    .encode(&mut moved[..BLOCK_BYTES]);
    std::fs::write(segment_path(&journal_directory(journals, 1), 0), &moved).unwrap();
    assert!(refused(rebuild(&options, &[], never).unwrap()).contains("carries shard 0"));
    journal_with_header(journals, 1, 0xb);
    // A gap in the shard directories.
    std::fs::create_dir_all(journal_directory(journals, 3)).unwrap();
    assert!(refused(rebuild(&options, &[], never).unwrap()).contains("without a gap"));
}

#[test]
fn a_stream_in_another_shards_journal_makes_the_count_ambiguous() {
    // A one-shard store with a second journal directory: two shards, but
    // ORDERS' records are in shard-0's journal and with two shards it
    // belongs to shard 1, so two is not the count that wrote the data.
    let directory = tempfile::tempdir().unwrap();
    let store = directory.path();
    build_store(store);
    let options = options(store);
    let streams = [(STREAM.to_string(), Some(GROUP))];
    let journal_id = match rebuild(&options, &streams, || 1).unwrap() {
        Rebuild::Unambiguous { layout, .. } => layout.journal_ids[0],
        other => panic!("one shard is unambiguous: {other:?}"),
    };
    assert_eq!(
        journal_id,
        store_layout::read(store, &options.journal_dir, SEGMENTS)
            .unwrap()
            .unwrap()
            .journal_ids[0]
    );
    // A second, never written journal directory: two shards.
    let second = journal_directory(&options.journal_dir, 1);
    std::fs::create_dir_all(&second).unwrap();
    assert_eq!(crate::jetstream::owner_of(STREAM, 2), 1);
    let why = refused(rebuild(&options, &streams, || 1).unwrap());
    assert!(why.contains("would live on shard 1"), "{why}");
}

#[test]
fn a_layout_is_rebuilt_but_never_over_a_valid_one() {
    let directory = tempfile::tempdir().unwrap();
    let store = directory.path();
    build_store(store);
    let layout_path = store.join("jetstream/layout");
    let original = std::fs::read(&layout_path).unwrap();
    let refused = repair(&options(store), &RepairTarget::Layout, true).unwrap();
    assert!(
        refused.refused.is_some() && !refused.applied,
        "{refused:#?}"
    );
    assert_eq!(std::fs::read(&layout_path).unwrap(), original);
    // Damaged: rebuilt from the journal, to the same ids.
    let mut damaged = original.clone();
    damaged[13] ^= 1;
    std::fs::write(&layout_path, &damaged).unwrap();
    let report = check(&options(store)).unwrap();
    assert_eq!(report.layout, report::LayoutStatus::Damaged);
    assert!(
        repair(&options(store), &RepairTarget::Layout, true)
            .unwrap()
            .applied
    );
    assert_eq!(std::fs::read(&layout_path).unwrap(), original);
}

#[test]
fn options_resolve_as_the_server_does() {
    let directory = tempfile::tempdir().unwrap();
    let config = directory.path().join("tern.toml");
    std::fs::write(
        &config,
        "[jetstream]\njournal_dir = \"/j\"\njournal_segment_size = \"8MB\"\njournal_segments = 3\nsync = \"never\"\n",
    )
    .unwrap();
    let options =
        CheckOptions::resolve(directory.path().join("data"), Some(config.clone()), None).unwrap();
    assert_eq!(options.journal_dir, PathBuf::from("/j"));
    assert_eq!(options.journal_segment_bytes, 8 << 20);
    assert_eq!(options.journal_segments, 3);
    assert_eq!(options.sync, SyncPolicy::Never);
    let flagged = CheckOptions::resolve(
        directory.path().join("data"),
        Some(config),
        Some(PathBuf::from("/k")),
    )
    .unwrap();
    assert_eq!(flagged.journal_dir, PathBuf::from("/k"), "the flag wins");
    let defaults = CheckOptions::resolve(PathBuf::from("data"), None, None).unwrap();
    assert!(defaults.store_dir.is_absolute());
    assert_eq!(
        defaults.journal_dir,
        defaults.store_dir.join("jetstream/journal")
    );
    assert_eq!(
        defaults.journal_segments,
        crate::config::DEFAULT_JOURNAL_SEGMENTS
    );
}
