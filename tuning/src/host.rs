//! The host's kernel settings as the tuners see them: sysfs and procfs
//! files named by their absolute path (`/proc/sys/vm/swappiness`) and
//! resolved under a root, `/` on a host and a temporary tree in tests, so
//! every tuner runs unchanged against a fake host.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Why a host file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error("{path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Write {
        path: String,
        source: std::io::Error,
    },
    /// The file grants no write permission to anyone (a read-only sysfs
    /// attribute is mode 0444; root is refused here, not by the kernel's
    /// less telling error).
    #[error("{path} is read-only (mode {mode:o})")]
    ReadOnly { path: String, mode: u32 },
}

/// sysfs and procfs under `root`.
#[derive(Debug, Clone)]
pub struct Host {
    root: PathBuf,
}

impl Host {
    /// This machine's.
    pub fn system() -> Host {
        Host::new("/")
    }

    /// A tree laid out like `/` (tests: a temporary directory).
    pub fn new(root: impl Into<PathBuf>) -> Host {
        Host { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn resolve(&self, path: &str) -> PathBuf {
        assert!(path.starts_with('/'), "host paths are absolute: {path}");
        self.root.join(&path[1..])
    }

    pub fn exists(&self, path: &str) -> bool {
        self.resolve(path).exists()
    }

    /// The file's contents, trimmed of surrounding white space.
    pub fn read(&self, path: &str) -> Result<String, HostError> {
        std::fs::read_to_string(self.resolve(path))
            .map(|text| text.trim().to_string())
            .map_err(|source| HostError::Read {
                path: path.to_string(),
                source,
            })
    }

    /// Writes `value` as one write, as `echo value > path` does.
    pub fn write(&self, path: &str, value: &str) -> Result<(), HostError> {
        let resolved = self.resolve(path);
        let mode = std::fs::metadata(&resolved)
            .map_err(|source| HostError::Write {
                path: path.to_string(),
                source,
            })?
            .permissions()
            .mode();
        if mode & 0o222 == 0 {
            return Err(HostError::ReadOnly {
                path: path.to_string(),
                mode: mode & 0o7777,
            });
        }
        std::fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(&resolved)
            .and_then(|mut file| file.write_all(format!("{value}\n").as_bytes()))
            .map_err(|source| HostError::Write {
                path: path.to_string(),
                source,
            })
    }

    /// The names in directory `path` that start with `prefix`, sorted
    /// (none when the directory does not exist).
    pub fn entries(&self, path: &str, prefix: &str) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(self.resolve(path)) else {
            return Vec::new();
        };
        let mut names: Vec<String> = entries
            .filter_map(|entry| entry.ok())
            .filter_map(|entry| entry.file_name().into_string().ok())
            .filter(|name| name.starts_with(prefix))
            .collect();
        names.sort();
        names
    }
}

/// A host tree holding `files` (path below the root, contents), for tests.
#[cfg(test)]
pub(crate) fn fake_tree(files: &[(&str, &str)]) -> (tempfile::TempDir, Host) {
    let root = tempfile::tempdir().expect("a temp dir");
    for (path, contents) in files {
        let path = root.path().join(path);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("dirs");
        std::fs::write(&path, format!("{contents}\n")).expect("a file");
    }
    let host = Host::new(root.path());
    (root, host)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_trimmed_writes_whole_and_refuses_read_only_files() {
        let root = tempfile::tempdir().expect("a temp dir");
        let host = Host::new(root.path());
        std::fs::create_dir_all(root.path().join("proc/sys/vm")).expect("dirs");
        std::fs::write(root.path().join("proc/sys/vm/swappiness"), "60\n").expect("file");
        assert_eq!(host.read("/proc/sys/vm/swappiness").expect("read"), "60");
        host.write("/proc/sys/vm/swappiness", "1").expect("write");
        assert_eq!(host.read("/proc/sys/vm/swappiness").expect("read"), "1");
        let file = root.path().join("proc/sys/vm/swappiness");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o444)).expect("chmod");
        let refused = host
            .write("/proc/sys/vm/swappiness", "10")
            .expect_err("read-only");
        assert!(
            matches!(refused, HostError::ReadOnly { mode: 0o444, .. }),
            "{refused}"
        );
        assert!(host.read("/proc/sys/vm/nothing").is_err());
        assert_eq!(host.entries("/proc/sys", "v"), vec!["vm".to_string()]);
        assert!(host.entries("/proc/none", "").is_empty());
    }
}
