//! `tern iotune` on real devices: temporary directories (the machine's
//! disk) and a loop device as a raw journal. Short workloads: this checks
//! the profile is written and sound, not the numbers.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;
use tern_it::loop_device::LoopDevice;

fn iotune(arguments: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tern"))
        .arg("iotune")
        .args(["--seconds", "0.02", "--file-size", "16MiB"])
        .args(arguments)
        .output()
        .expect("tern runs")
}

fn profile(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).expect("the profile is written")).expect("JSON")
}

#[test]
fn a_profile_is_written_for_directories() {
    let directory = tempfile::tempdir().unwrap();
    let store = directory.path().join("data");
    let output = iotune(&["--store_dir", store.to_str().unwrap()]);
    assert!(output.status.success(), "{output:?}");
    let written = profile(&store.join("io-profile.json"));
    assert_eq!(written["version"], 1);
    assert_eq!(
        written["journal"]["durable_writes"]
            .as_array()
            .unwrap()
            .len(),
        5
    );
    assert_eq!(written["store"]["reads"].as_array().unwrap().len(), 7);
    for measurement in written["store"]["reads"].as_array().unwrap() {
        assert!(
            measurement["operations"].as_u64().unwrap() > 0,
            "{measurement}"
        );
        assert!(measurement["bytes_per_second"].as_f64().unwrap() > 0.0);
    }
    let settings = &written["settings"];
    let batch = settings["journal_batch_bytes_max"].as_u64().unwrap();
    assert!(
        (256 << 10..=8 << 20).contains(&batch) && batch % 4096 == 0,
        "{settings}"
    );
    let prefetch = settings["store_prefetch_runs"].as_u64().unwrap();
    assert!((1..=4).contains(&prefetch), "{settings}");
    // Nothing is left behind but the profile.
    let leftovers: Vec<_> = std::fs::read_dir(&store)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .filter(|name| name.starts_with(".tern-iotune"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn a_raw_journal_device_is_measured_only_before_tern_formats_it() {
    let directory = tempfile::tempdir().unwrap();
    let device = LoopDevice::attach(&directory.path().join("journal.img"), 64 << 20, true);
    let path = device.path.display().to_string();
    let store = directory.path().join("data");
    let arguments = [
        "--store_dir",
        store.to_str().unwrap(),
        "--journal_dir",
        &path,
    ];
    let output = iotune(&arguments);
    assert!(output.status.success(), "{output:?}");
    assert_eq!(
        profile(&store.join("io-profile.json"))["journal"]["path"],
        path.as_str()
    );
    // The first 1 MiB (where the header goes) was not touched.
    assert!(device.read(0, 1 << 20).iter().all(|&byte| byte == 0));

    // Once the device holds a tern journal, measuring is refused.
    let opened = tern_storage::journal_device::JournalDevice::open(&device.path).unwrap();
    let header = tern_storage::journal_device::DeviceHeader {
        device_bytes: opened.facts().bytes,
        device_id: 1,
        segments: 2,
        segment_bytes: 4 << 20,
        server_name: String::new(),
        journal_ids: vec![7],
    };
    opened.format(&header).unwrap();
    drop(opened);
    let refused = iotune(&arguments);
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("holds a tern journal"),
        "{refused:?}"
    );
}
