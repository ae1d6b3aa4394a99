//! `tern tune` against a fake host tree (`--root`): check changes
//! nothing, apply sets what differs and a second apply changes nothing,
//! a read-only file makes apply fail with a line naming it.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

fn tern(root: &Path, arguments: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tern"))
        .arg("tune")
        .args(arguments)
        .arg("--root")
        .arg(root)
        .output()
        .expect("tern runs")
}

fn write(root: &Path, path: &str, contents: &str) {
    let path = root.join(path);
    std::fs::create_dir_all(path.parent().expect("a parent")).expect("dirs");
    std::fs::write(path, format!("{contents}\n")).expect("a file");
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn check_then_apply_then_apply_again() {
    let root = tempfile::tempdir().expect("a temp dir");
    write(root.path(), "proc/sys/vm/swappiness", "60");
    write(root.path(), "proc/sys/fs/aio-max-nr", "65536");
    write(root.path(), "sys/block/nvme0n1/queue/nomerges", "0");
    let tuners = "--tuners=swappiness,aio_events,disk_nomerges";

    let checked = tern(root.path(), &["check", tuners]);
    assert!(checked.status.success(), "{checked:?}");
    let text = stdout(&checked);
    assert!(
        text.contains(
            "would change  swappiness             /proc/sys/vm/swappiness \"60\" -> \"1\""
        ),
        "{text}"
    );
    assert_eq!(
        std::fs::read_to_string(root.path().join("proc/sys/vm/swappiness")).expect("read"),
        "60\n"
    );

    let applied = tern(root.path(), &["apply", tuners]);
    assert!(applied.status.success(), "{applied:?}");
    let text = stdout(&applied);
    assert!(text.ends_with("3 changed, 0 could not be set\n"), "{text}");
    assert_eq!(
        std::fs::read_to_string(root.path().join("sys/block/nvme0n1/queue/nomerges"))
            .expect("read"),
        "2\n"
    );

    let again = tern(root.path(), &["apply", tuners]);
    assert!(again.status.success(), "{again:?}");
    let text = stdout(&again);
    assert!(text.ends_with("0 changed, 0 could not be set\n"), "{text}");
    assert_eq!(
        text.lines().filter(|line| line.starts_with("ok ")).count(),
        3,
        "{text}"
    );
}

#[test]
fn a_read_only_file_fails_apply_and_unknown_tuners_are_usage_errors() {
    let root = tempfile::tempdir().expect("a temp dir");
    write(root.path(), "proc/sys/vm/swappiness", "60");
    let file = root.path().join("proc/sys/vm/swappiness");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o444)).expect("chmod");
    let applied = tern(root.path(), &["apply", "--tuners", "swappiness"]);
    assert_eq!(applied.status.code(), Some(1), "{applied:?}");
    let text = stdout(&applied);
    assert!(text.contains("cannot        swappiness"), "{text}");
    assert!(text.contains("read-only"), "{text}");

    let unknown = tern(root.path(), &["check", "--tuners", "turbo"]);
    assert_eq!(unknown.status.code(), Some(2), "{unknown:?}");
    assert!(
        String::from_utf8_lossy(&unknown.stderr).contains("no tuner \"turbo\""),
        "{unknown:?}"
    );
}

/// `tern check` on a fake host: one line per fact, the verdicts the files
/// call for, nothing changed.
#[test]
fn host_facts_on_a_fake_tree() {
    let root = tempfile::tempdir().expect("a temp dir");
    write(root.path(), "proc/stat", "cpu  100 0 50 800 10 0 0 40 0 0");
    write(
        root.path(),
        "sys/devices/system/cpu/cpuidle/current_driver",
        "haltpoll",
    );
    write(
        root.path(),
        "sys/devices/system/cpu/cpuidle/current_governor",
        "haltpoll",
    );
    write(
        root.path(),
        "proc/interrupts",
        "           CPU0       CPU1\n  24:          0       1200  PCI-MSI 1-edge      nvme0q1",
    );
    let store = root.path().join("store");
    std::fs::create_dir_all(&store).expect("a store dir");
    let output = Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(["check", "--interval", "0", "--cores", "1"])
        .arg("--root")
        .arg(root.path())
        .arg("--store_dir")
        .arg(&store)
        .output()
        .expect("tern runs");
    assert!(output.status.success(), "{output:?}");
    let text = stdout(&output);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 6, "{text}");
    assert!(
        lines[0].starts_with("look     steal        4.0 % of CPU time"),
        "{text}"
    );
    assert_eq!(
        lines[1],
        "fine     cpuidle      driver haltpoll, governor haltpoll"
    );
    assert!(lines[2].starts_with("unknown  governor"), "{text}");
    assert_eq!(
        lines[3],
        "look     interrupts   on the shards' cores since boot: nvme0q1 1200"
    );
    assert!(lines[4].contains(" memlock "), "{text}");
    // The fake tree has no /sys/dev/block for the temp dir's device.
    assert!(lines[5].starts_with("unknown  device under"), "{text}");
}
