//! Writes seed inputs for the storage fuzz targets (valid journal images the
//! fuzzer then mutates past their checksums; small damage descriptions for
//! the block-store target, which writes its own stores):
//! `cargo run -p tern-storage --example fuzz_seeds -- fuzz/corpus`.

use std::path::PathBuf;

use futures_lite::future::block_on;
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
            formatted_before: false,
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
    // A valid device header (one and four shards), for the header target.
    let header_dir = root.join("journal_device_header");
    std::fs::create_dir_all(&header_dir).unwrap();
    for shards in [1u64, 4] {
        let header = tern_storage::journal_device::DeviceHeader {
            device_bytes: 1 << 30,
            device_id: 0x5eed + shards,
            segments: 8,
            segment_bytes: 64 << 20,
            server_name: format!("n{shards}"),
            journal_ids: (1..=shards).collect(),
        };
        std::fs::write(header_dir.join(format!("header-{shards}")), header.encode()).unwrap();
    }
    // An I/O profile as `tern iotune` writes it (tern_broker::io_profile).
    let profile_dir = root.join("io_profile");
    std::fs::create_dir_all(&profile_dir).unwrap();
    std::fs::write(
        profile_dir.join("profile"),
        r#"{"version": 1, "measured_unix_seconds": 1796000000,
  "journal": {"path": "/dev/nvme0n1", "durable_writes": [{"bytes": 4096, "queue_depth": 1, "operations": 10, "bytes_per_second": 1.5e8, "p50_micros": 20.0, "p99_micros": 80.0}], "writes": [], "reads": []},
  "store": {"path": "/var/lib/tern", "durable_writes": [], "writes": [], "reads": []},
  "settings": {"journal_batch_bytes_max": 1048576, "store_write_buffer_bytes": 262144, "store_read_ahead_bytes": 1048576, "store_prefetch_runs": 3}}"#,
    )
    .unwrap();
    // The block-store target writes its own valid stores (one per
    // scenario) and reads `[scenario, file, damage, position_lo,
    // position_hi, mask...]`: a seed per scenario and kind of damage.
    for scenario in 0u8..6 {
        let seeds: [(&str, Vec<u8>); 5] = [
            ("bit", vec![scenario, 0, 0, 0, 0, 0x08]),
            ("block", {
                let mut seed = vec![scenario, 1, 1, 1, 0];
                seed.extend(vec![0xffu8; 64]);
                seed
            }),
            ("none", vec![scenario, 2, 0, 0, 0, 0]),
            ("truncate", vec![scenario, 0, 2, 0x00, 0x10]),
            ("remove", vec![scenario, 1, 3, 0, 0]),
        ];
        for (damage, seed) in seeds {
            std::fs::write(
                store_dir.join(format!("scenario-{scenario}-{damage}")),
                seed,
            )
            .unwrap();
        }
    }
}
