//! Loop devices over sparse files: the raw block devices the raw-journal
//! tests give `--journal_dir` (the machine has no spare NVMe namespace).
//! Needs root and util-linux's `losetup`.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A loop device over a file; detached when dropped.
pub struct LoopDevice {
    pub path: PathBuf,
    pub backing: PathBuf,
}

impl LoopDevice {
    /// A new `bytes`-byte sparse file at `backing`, attached with the loop
    /// driver's own direct I/O on or off (on: the backing file bypasses the
    /// page cache, as a real device's writes do).
    pub fn attach(backing: &Path, bytes: u64, direct_io: bool) -> LoopDevice {
        let file = std::fs::File::create(backing).expect("create the backing file");
        file.set_len(bytes).expect("size the backing file");
        drop(file);
        // Parallel tests may race for the same free device: losetup then
        // fails with "Device or resource busy"; a bounded retry takes the next.
        let mut attempts = 0;
        let output = loop {
            let output = Command::new("losetup")
                .args(["--find", "--show"])
                .arg(if direct_io {
                    "--direct-io=on"
                } else {
                    "--direct-io=off"
                })
                .arg(backing)
                .output()
                .expect("losetup runs (util-linux; the test needs root and loop devices)");
            attempts += 1;
            if output.status.success() || attempts == 5 {
                break output;
            }
        };
        assert!(
            output.status.success(),
            "losetup failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        LoopDevice {
            path: PathBuf::from(String::from_utf8(output.stdout).unwrap().trim()),
            backing: backing.to_path_buf(),
        }
    }

    /// Reads `bytes` at `offset` of the device (through the page cache of
    /// the backing file: the server is stopped).
    pub fn read(&self, offset: u64, bytes: usize) -> Vec<u8> {
        use std::os::unix::fs::FileExt;
        let file = std::fs::File::open(&self.path).expect("open the loop device");
        let mut buffer = vec![0u8; bytes];
        file.read_exact_at(&mut buffer, offset)
            .expect("read the loop device");
        buffer
    }

    /// Writes `bytes` at `offset` of the device and flushes it.
    pub fn write(&self, offset: u64, bytes: &[u8]) {
        use std::os::unix::fs::FileExt;
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&self.path)
            .expect("open the loop device");
        file.write_all_at(bytes, offset)
            .expect("write the loop device");
        file.sync_all().expect("flush the loop device");
    }

    /// XORs `mask` into the byte at `offset`.
    pub fn flip(&self, offset: u64, mask: u8) {
        let byte = self.read(offset, 1)[0];
        self.write(offset, &[byte ^ mask]);
    }
}

impl Drop for LoopDevice {
    fn drop(&mut self) {
        let _ = Command::new("losetup")
            .arg("--detach")
            .arg(&self.path)
            .status();
    }
}
