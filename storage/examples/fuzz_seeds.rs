//! Writes seed inputs for the storage fuzz targets (valid journal and block
//! store images the fuzzer then mutates past their checksums):
//! `cargo run -p tern-storage --example fuzz_seeds -- fuzz/corpus`.

use std::path::PathBuf;

use futures_lite::future::block_on;
use tern_storage::block_store::{Manifest, MemoryFiles, NewMessage, StreamConfig, StreamLog};
use tern_storage::format::BLOCK_BYTES;
use tern_storage::memory::MemoryDevice;
use tern_storage::{Journal, JournalConfig, NewRecord, SyncPolicy};

fn main() {
    let root = PathBuf::from(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| "fuzz/corpus".into()),
    );
    let journal_dir = root.join("journal_recovery");
    let store_dir = root.join("block_store_open");
    std::fs::create_dir_all(&journal_dir).unwrap();
    std::fs::create_dir_all(&store_dir).unwrap();
    for records in [1u64, 3, 9, 20] {
        let device = MemoryDevice::new(2, 4 * BLOCK_BYTES as u64, records);
        let config = JournalConfig {
            shard: 0,
            batch_bytes_max: 2 * BLOCK_BYTES,
            sync: SyncPolicy::Always,
            journal_id: 1,
        };
        let (journal, _) = block_on(Journal::open(device, config, |_| {})).unwrap();
        for index in 1..=records {
            let body = vec![index as u8; (index as usize * 37) % 300];
            journal
                .try_append(NewRecord {
                    kind: 1,
                    group: index % 2,
                    term: 1,
                    index,
                    body: &body,
                })
                .unwrap();
            if index % 3 == 0 {
                block_on(journal.flush()).unwrap();
            }
        }
        block_on(journal.flush()).unwrap();
        let mut image = journal.device().contents(0);
        image.extend(journal.device().contents(1));
        std::fs::write(journal_dir.join(format!("journal-{records}")), image).unwrap();
    }
    for messages in [1u64, 5, 30] {
        let files = MemoryFiles::new();
        let config = StreamConfig {
            write_buffer_bytes: 2 * BLOCK_BYTES,
            tail_cache_bytes: 0,
            read_chunk_bytes: 2 * BLOCK_BYTES,
            ..StreamConfig::default()
        };
        let (mut log, _) =
            block_on(StreamLog::open(files.clone(), config, &Manifest::new(1))).unwrap();
        for sequence in 1..=messages {
            let payload = vec![sequence as u8; 40 + sequence as usize * 3];
            block_on(log.append(NewMessage {
                sequence,
                timestamp_ns: sequence,
                subject: b"seed.subject",
                headers: b"",
                payload: &payload,
            }))
            .unwrap();
        }
        log.delete(1);
        let manifest = block_on(log.sync()).unwrap().encode();
        // The fuzz target reads a 2-byte length, that many bytes of
        // manifest, then 8 KiB per file: the segments the manifest names
        // (at most two) and its deletes log, then a file it does not name.
        let mut image = (manifest.len() as u16).to_le_bytes().to_vec();
        image.extend_from_slice(&manifest);
        for name in ["00000000000000000001.blk", "deletes.log"] {
            let mut contents = files.contents(name);
            contents.resize(2 * BLOCK_BYTES, 0);
            image.extend(contents);
        }
        image.extend(vec![0x5au8; BLOCK_BYTES]);
        std::fs::write(store_dir.join(format!("stream-{messages}")), image).unwrap();
    }
}
