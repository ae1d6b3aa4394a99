//! The journal on a raw block device (`--journal_dir /dev/...`), here a
//! loop device: what it refuses (a filesystem on it, a mounted device, a
//! device too small, another store's or another server's device, a shard
//! count or segment geometry change, both header copies damaged), what it
//! repairs (one header copy damaged, a flipped bit in a journal batch), and
//! that acknowledged messages survive each restart. The SIGKILL loops on a
//! raw journal are in `jetstream_crash.rs`.

use crate::common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use async_nats::jetstream::{self, stream::StorageType};

use common::{Flavor, Options, Server, Stopped, TIMEOUT};
use tern_it::loop_device::LoopDevice;

/// Where the journal regions start (after the device header area).
const HEADER_AREA_BYTES: u64 = 1 << 20;
const SEGMENT_BYTES: u64 = 8 << 20;
const SEGMENTS: u64 = 4;
/// 2 shards × 4 segments × 8 MiB, plus the header area.
const DEVICE_BYTES: u64 = HEADER_AREA_BYTES + 2 * SEGMENTS * SEGMENT_BYTES;
const MESSAGES: u64 = 200;

fn options(device: &LoopDevice) -> Options {
    Options {
        journal_segment_bytes: Some(SEGMENT_BYTES),
        journal_segments: Some(SEGMENTS as u32),
        extra_args: vec!["--journal_dir".into(), device.path.display().to_string()],
        ..Options::jetstream()
    }
}

/// A fresh server (tern, two shards) on `device` in a new directory.
fn start_on(device: &LoopDevice) -> Server {
    Server::start(Flavor::Tern, options(device))
}

/// Creates stream `RAW` and publishes [`MESSAGES`] acknowledged messages.
async fn fill(server: &Server) {
    let js = jetstream::new(server.connect().await);
    js.create_stream(jetstream::stream::Config {
        name: "RAW".into(),
        subjects: vec!["raw.>".into()],
        storage: StorageType::File,
        ..Default::default()
    })
    .await
    .expect("create RAW");
    for index in 1..=MESSAGES {
        let ack = js
            .publish(format!("raw.{index}"), format!("body {index}").into())
            .await
            .expect("publish")
            .await
            .expect("ack");
        assert_eq!(ack.sequence, index);
    }
}

/// Every acknowledged message is there, intact.
async fn check(server: &Server) {
    let js = jetstream::new(server.connect().await);
    let mut stream = tokio::time::timeout(TIMEOUT, js.get_stream("RAW"))
        .await
        .expect("STREAM.INFO in time")
        .unwrap_or_else(|error| panic!("RAW: {error}; log:\n{}", server.log_tail()));
    let info = stream.info().await.expect("info");
    assert_eq!(
        (
            info.state.messages,
            info.state.first_sequence,
            info.state.last_sequence
        ),
        (MESSAGES, 1, MESSAGES),
        "log:\n{}",
        server.log_tail()
    );
    for index in 1..=MESSAGES {
        let message = stream.get_raw_message(index).await.expect("MSG.GET");
        assert_eq!(message.subject.as_str(), format!("raw.{index}"));
        assert_eq!(&message.payload[..], format!("body {index}").as_bytes());
    }
}

fn mkfs_ext4(device: &Path) {
    let status = Command::new("mkfs.ext4")
        .args(["-q", "-F"])
        .arg(device)
        .status()
        .expect("mkfs.ext4 runs (e2fsprogs)");
    assert!(status.success());
}

/// A filesystem on the device, the device mounted, a device too small, a
/// character device: each refused with what to do, nothing written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refuses_a_device_in_use_or_holding_something_else() {
    let backing = tempfile::tempdir().unwrap();
    let device = LoopDevice::attach(&backing.path().join("fs.img"), DEVICE_BYTES, true);
    mkfs_ext4(&device.path);
    let superblock = device.read(1024, 4096);
    let stopped = Stopped {
        flavor: Flavor::Tern,
        options: options(&device),
        dir: tempfile::tempdir().unwrap(),
    };
    let dir = stopped.refused("holds an ext2/3/4 filesystem; nothing was changed");
    assert_eq!(
        device.read(1024, 4096),
        superblock,
        "the filesystem was touched"
    );

    let mount_point = tempfile::tempdir().unwrap();
    let status = Command::new("mount")
        .arg(&device.path)
        .arg(mount_point.path())
        .status()
        .expect("mount runs");
    assert!(status.success());
    let stopped = Stopped {
        flavor: Flavor::Tern,
        options: options(&device),
        dir,
    };
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        stopped.refused("is in use (mounted")
    }));
    let _ = Command::new("umount").arg(mount_point.path()).status();
    let dir = outcome.unwrap_or_else(|panic| std::panic::resume_unwind(panic));

    let small = LoopDevice::attach(&backing.path().join("small.img"), DEVICE_BYTES / 2, true);
    let stopped = Stopped {
        flavor: Flavor::Tern,
        options: options(&small),
        dir,
    };
    let dir = stopped.refused("the journal needs 68157440");
    assert!(small.read(0, 8192).iter().all(|&byte| byte == 0));

    let mut options = options(&device);
    options.extra_args = vec!["--journal_dir".into(), "/dev/null".into()];
    Stopped {
        flavor: Flavor::Tern,
        options,
        dir,
    }
    .refused("/dev/null: not a block device");
}

/// A device formatted by one server keeps its identity: another store, a
/// server with another name, another shard count or segment geometry are
/// refused, and the data stays readable by the right server after each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refuses_another_store_server_shard_count_or_geometry() {
    let backing = tempfile::tempdir().unwrap();
    let device = LoopDevice::attach(&backing.path().join("journal.img"), DEVICE_BYTES, true);
    let server = start_on(&device);
    server
        .wait_log("formatted for 2 shard(s), 4 segments", TIMEOUT)
        .await;
    fill(&server).await;
    // SIGKILL: the newest messages are only in the journal.
    let mut stopped = server.into_stopped(false);

    let other_store = Stopped {
        flavor: Flavor::Tern,
        options: options(&device),
        dir: tempfile::tempdir().unwrap(),
    };
    other_store.refused("holds the journal of another store");

    let original = stopped.options.clone();
    stopped
        .options
        .extra_args
        .extend(["-n".to_string(), "renamed".to_string()]);
    let mut stopped = Stopped {
        dir: stopped.refused("belongs to server \"\"; this server is \"renamed\""),
        options: original.clone(),
        flavor: Flavor::Tern,
    };
    stopped.options.shards = Some(1);
    let mut stopped = Stopped {
        dir: stopped.refused("this one runs 1"),
        options: original.clone(),
        flavor: Flavor::Tern,
    };
    stopped.options.journal_segments = Some(3);
    let stopped = Stopped {
        dir: stopped.refused("laid out with 4 segments of 8388608 bytes per shard"),
        options: original,
        flavor: Flavor::Tern,
    };
    let server = stopped.start();
    check(&server).await;
}

/// One damaged header copy is rewritten from the other; both damaged is
/// refused without a change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_header_copy_is_rewritten_and_two_are_refused() {
    let backing = tempfile::tempdir().unwrap();
    let device = LoopDevice::attach(&backing.path().join("journal.img"), DEVICE_BYTES, true);
    let server = start_on(&device);
    fill(&server).await;
    let stopped = server.into_stopped(false);
    let header = device.read(0, 4096);
    assert_eq!(&header[0..8], b"TERNJDEV");
    assert_eq!(
        device.read(4096, 4096),
        header,
        "the two copies are identical"
    );

    device.flip(100, 0x10);
    let server = stopped.start();
    server
        .wait_log(
            "one copy of the device header was damaged and was rewritten",
            TIMEOUT,
        )
        .await;
    check(&server).await;
    let stopped = server.into_stopped(true);
    assert_eq!(device.read(0, 4096), header, "copy A rewritten");

    device.flip(4096 + 40, 0x01);
    let server = stopped.start();
    check(&server).await;
    let stopped = server.into_stopped(true);
    assert_eq!(device.read(4096, 4096), header, "copy B rewritten");

    device.flip(24, 0x80);
    device.flip(4096 + 24, 0x80);
    let damaged = device.read(0, 8192);
    let dir = stopped.refused("both copies of the journal header are damaged");
    assert_eq!(device.read(0, 8192), damaged, "nothing was changed");
    // Restored, the store is whole again.
    device.write(0, &header);
    device.write(4096, &header);
    let server = Stopped {
        flavor: Flavor::Tern,
        options: options(&device),
        dir,
    }
    .start();
    check(&server).await;
}

/// A bit flipped in a journal batch (the server SIGKILLed, so the newest
/// messages are only there) is found and rebuilt from the batch's parity
/// block: every acknowledged message is read back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flipped_bit_in_a_journal_batch_is_repaired() {
    let backing = tempfile::tempdir().unwrap();
    let device = LoopDevice::attach(&backing.path().join("journal.img"), DEVICE_BYTES, true);
    let server = start_on(&device);
    fill(&server).await;
    let stopped = server.into_stopped(false);
    // The shard owning RAW: the region whose first segment holds a batch
    // (block 1, magic `TJB1`) with a record after its 64-byte header.
    let region_bytes = SEGMENTS * SEGMENT_BYTES;
    let region = (0..2u64)
        .map(|shard| HEADER_AREA_BYTES + shard * region_bytes)
        .find(|&offset| {
            let batch = device.read(offset + 4096, 4096);
            &batch[0..4] == b"TJB1" && batch[64..96].iter().any(|&byte| byte != 0)
        })
        .unwrap_or_else(|| {
            let starts: Vec<String> = (0..2u64)
                .map(|shard| {
                    let offset = HEADER_AREA_BYTES + shard * region_bytes;
                    common::preview(&device.read(offset, 8192))
                })
                .collect();
            panic!("no shard wrote its journal: {starts:?}")
        });
    // Inside the first batch's first record (block 1 of segment 0).
    device.flip(region + 4096 + 70, 0x04);
    let server = stopped.start();
    server
        .wait_log(
            "from its redundant copy and written back",
            Duration::from_secs(10),
        )
        .await;
    check(&server).await;
}
