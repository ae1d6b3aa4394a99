//! The storage pipeline as the broker will run it: records become durable in
//! the journal; a background task queue applies them to the stream's block
//! store in large writes and checkpoints the journal, which recycles its
//! segments. A journal far smaller than the data never fills, and after a
//! restart the journal's live records bring the block store back up to date.
//!
//! The checkpoint is in the order the block store's manifest requires: sync
//! the store, store the manifest it returns durably (here a file beside the
//! store's directory), only then let the journal recycle, then tell the
//! store (`checkpointed`) so it removes what the new manifest dropped.

use std::cell::Cell;
use std::rc::Rc;

use tern_storage::background::{background_queue, spawn_in};
use tern_storage::block_store::{DmaFiles, Manifest, NewMessage, StreamConfig, StreamLog};
use tern_storage::dma::{DmaDevice, SyncMethod};
use tern_storage::{Journal, JournalConfig, NewRecord, SyncPolicy};

const STREAM_GROUP: u64 = 11;
const KIB: u64 = 1024;

fn encode(subject: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut body = (subject.len() as u32).to_le_bytes().to_vec();
    body.extend_from_slice(subject);
    body.extend_from_slice(payload);
    body
}

fn decode(body: &[u8]) -> (&[u8], &[u8]) {
    let length = u32::from_le_bytes(body[0..4].try_into().unwrap()) as usize;
    (&body[4..4 + length], &body[4 + length..])
}

/// Replaces `path` atomically and durably with `bytes` (what a broker does
/// with its checkpoint file).
fn store_manifest(path: &std::path::Path, bytes: &[u8]) {
    use std::io::Write;
    let temporary = path.with_extension("tmp");
    let mut file = std::fs::File::create(&temporary).unwrap();
    file.write_all(bytes).unwrap();
    file.sync_all().unwrap();
    std::fs::rename(&temporary, path).unwrap();
    std::fs::File::open(path.parent().unwrap())
        .unwrap()
        .sync_all()
        .unwrap();
}

fn payload(index: u64) -> Vec<u8> {
    vec![(index % 251) as u8; 700 + (index as usize * 13) % 600]
}

#[test]
fn journal_feeds_the_block_store_and_recycles() {
    let directory = tempfile::tempdir().unwrap();
    let journal_path = directory.path().join("journal");
    let store_path = directory.path().join("stream");
    let manifest_path = directory.path().join("stream.manifest");
    let total: u64 = 6000;
    let executor = glommio::LocalExecutorBuilder::default()
        .io_memory(8 << 20)
        .make()
        .unwrap();
    let (journal_path2, store_path2, manifest_path2) = (
        journal_path.clone(),
        store_path.clone(),
        manifest_path.clone(),
    );
    executor.run(async move {
        // 3 segments of 256 KiB: ~600 KiB of room for ~6 MB of messages.
        let device = DmaDevice::open_directory(&journal_path2, 3, 256 * KIB, SyncMethod::Dsync)
            .await
            .unwrap();
        let config = JournalConfig {
            shard: 0,
            batch_bytes_max: 64 * KIB as usize,
            sync: SyncPolicy::Always,
            journal_id: 9,
            formatted_before: false,
        };
        let (journal, _) = Journal::open(device, config, |_| {}).await.unwrap();
        let journal = Rc::new(journal);
        glommio::spawn_local({
            let journal = journal.clone();
            async move { journal.run().await }
        })
        .detach();
        let files = DmaFiles::open(&store_path2).await.unwrap();
        let store_config = StreamConfig {
            segment_bytes_max: 1 << 20,
            write_buffer_bytes: 256 * 1024,
            ..StreamConfig::default()
        };
        let (store, _) = StreamLog::open(files, store_config, &Manifest::new(1))
            .await
            .unwrap();
        let durable_index = Rc::new(Cell::new(0u64));
        let advanced = Rc::new(tern_shard::Waiters::new());
        // The applier: background queue, takes what is durable in the journal.
        let queue = background_queue("block-store");
        let applier = spawn_in(queue, {
            let (journal, durable_index, advanced) =
                (journal.clone(), durable_index.clone(), advanced.clone());
            async move {
                let mut store = store;
                let mut applied = 0u64;
                let mut pending = std::collections::VecDeque::new();
                while applied < total {
                    // Wait for the next durable index, then apply everything durable.
                    advanced.wait_until(|| durable_index.get() > applied).await;
                    while applied < durable_index.get() {
                        applied += 1;
                        pending.push_back(applied);
                    }
                    while let Some(index) = pending.pop_front() {
                        let body =
                            encode(format!("orders.{}", index % 5).as_bytes(), &payload(index));
                        let (subject, data) = decode(&body);
                        store
                            .append(NewMessage {
                                sequence: index,
                                timestamp_ns: index,
                                subject,
                                headers: b"",
                                payload: data,
                            })
                            .await
                            .unwrap();
                    }
                    let manifest = store.sync().await.unwrap();
                    store_manifest(&manifest_path2, &manifest.encode());
                    journal.checkpoint(STREAM_GROUP, manifest.last_sequence);
                    store.checkpointed().await.unwrap();
                }
                store
            }
        });
        for index in 1..=total {
            let body = encode(format!("orders.{}", index % 5).as_bytes(), &payload(index));
            let sequence = journal
                .append(NewRecord {
                    kind: 1,
                    group: STREAM_GROUP,
                    term: 1,
                    index,
                    body: &body,
                })
                .await
                .unwrap();
            journal.wait_durable(sequence).await.unwrap();
            durable_index.set(index);
            advanced.wake_all();
        }
        let store = applier.await;
        assert_eq!(store.state().messages, total);
        let stats = journal.stats();
        assert!(
            stats.segments_recycled >= 5,
            "the journal recycled: {stats:?}"
        );
    });
    // Restart: the block store may be behind the journal; replaying the
    // journal's live records past the store's last sequence catches it up.
    let executor = glommio::LocalExecutorBuilder::default()
        .io_memory(8 << 20)
        .make()
        .unwrap();
    executor.run(async move {
        let files = DmaFiles::open(&store_path).await.unwrap();
        let manifest = Manifest::decode(&std::fs::read(&manifest_path).unwrap()).unwrap();
        let (mut store, _) = StreamLog::open(files, StreamConfig::default(), &manifest)
            .await
            .unwrap();
        let have = store.last_sequence();
        let mut missing = Vec::new();
        let device = DmaDevice::open_directory(&journal_path, 3, 256 * KIB, SyncMethod::Dsync)
            .await
            .unwrap();
        let config = JournalConfig {
            shard: 0,
            batch_bytes_max: 64 * KIB as usize,
            sync: SyncPolicy::Always,
            journal_id: 9,
            formatted_before: false,
        };
        let (_journal, report) = Journal::open(device, config, |view| {
            if view.header.group == STREAM_GROUP && view.header.index > have {
                missing.push((view.header.index, view.body.to_vec()));
            }
        })
        .await
        .unwrap();
        assert!(report.records > 0);
        for (index, body) in missing {
            let (subject, data) = decode(&body);
            store
                .append(NewMessage {
                    sequence: index,
                    timestamp_ns: index,
                    subject,
                    headers: b"",
                    payload: data,
                })
                .await
                .unwrap();
        }
        assert_eq!(store.last_sequence(), total);
        let mut checked = 0u64;
        store
            .replay(1, |view| {
                checked += 1;
                assert_eq!(view.payload, &payload(view.sequence)[..]);
            })
            .await
            .unwrap();
        assert_eq!(checked, total);
    });
}
