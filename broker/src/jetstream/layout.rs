//! `<store_dir>/jetstream/layout`: the store's identity. It names the shard
//! count that wrote the data (each shard's journal holds the records of the
//! streams it owns, so a server with another count would look for them in
//! the wrong journal) and each shard's journal id (every segment of that
//! journal carries it, so a journal directory of another server, or one
//! reformatted, is refused instead of read as empty).
//!
//! Text, so an operator can read it, with a checksum, so damage is found:
//!
//! ```text
//! tern-store 2
//! shards 2
//! journal 0 4f1c2a9e0b7d3c55
//! journal 1 9a0e77c1d2b34f60
//! checksum 1b2c3d4e
//! ```
//!
//! `checksum` is the CRC-32C (hex) of every byte before that line. Version 1
//! of tern wrote only `shards N`; its journals are in a format this version
//! does not read, so such a store is refused with that said.
//!
//! Created only for a store that holds no JetStream data: a missing layout
//! beside stream directories or journal segments is damage, never a reason
//! to start afresh.

use std::path::{Path, PathBuf};

use tern_storage::dma::DmaDevice;
use tern_storage::format::checksum;

const FILE: &str = "layout";
const VERSION: u32 = 2;
/// Larger than any layout tern writes (one line per shard).
const LAYOUT_BYTES_MAX: u64 = 1 << 20;

/// The identity of a store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub shard_count: usize,
    /// Journal id of shard `i` at index `i`.
    pub journal_ids: Vec<u64>,
}

#[derive(Debug, thiserror::Error)]
pub enum LayoutError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error(
        "JetStream data in {root} was written by a server with {found} shard(s) ({root}/layout); \
         this one runs {wanted}. Start it on the same number of cores (--cores); changing the \
         shard count of existing JetStream data is not supported yet"
    )]
    ShardCount {
        root: String,
        found: usize,
        wanted: usize,
    },
    #[error(
        "{path} is damaged ({reason}); nothing was changed. It names the shard count and the journal ids \
         of this store: restore it from a backup, or see `tern storage check {store}`"
    )]
    Damaged {
        path: String,
        store: String,
        reason: LayoutDecodeError,
    },
    #[error(
        "{path} is missing but the store holds JetStream data ({evidence}); nothing was changed. \
         Restore the file, or see `tern storage check {store}`"
    )]
    Missing {
        path: String,
        store: String,
        evidence: String,
    },
    #[error(
        "{path} was written by an earlier tern (store format 1), whose journals this version \
         cannot read; nothing was changed. Start the earlier version on it, or move the data away"
    )]
    OldFormat { path: String },
}

impl Layout {
    pub fn encode(&self) -> String {
        let mut text = format!("tern-store {VERSION}\nshards {}\n", self.shard_count);
        for (shard, id) in self.journal_ids.iter().enumerate() {
            text.push_str(&format!("journal {shard} {id:016x}\n"));
        }
        let sum = checksum(text.as_bytes());
        text.push_str(&format!("checksum {sum:08x}\n"));
        text
    }

    /// Strict: every line in order, nothing else, the checksum right.
    pub fn decode(text: &str) -> Result<Layout, LayoutDecodeError> {
        let body_end = text
            .rfind("checksum ")
            .ok_or(LayoutDecodeError::NoChecksum)?;
        let (body, last) = text.split_at(body_end);
        let stored = last
            .strip_prefix("checksum ")
            .and_then(|rest| rest.strip_suffix('\n'))
            .and_then(|hex| u32::from_str_radix(hex, 16).ok())
            .ok_or(LayoutDecodeError::MalformedChecksum)?;
        if stored != checksum(body.as_bytes()) {
            return Err(LayoutDecodeError::ChecksumMismatch);
        }
        let mut lines = body.lines();
        if lines.next() != Some(&format!("tern-store {VERSION}")) {
            return Err(LayoutDecodeError::UnknownVersion);
        }
        let shard_count: usize = lines
            .next()
            .and_then(|line| line.strip_prefix("shards "))
            .and_then(|count| count.parse().ok())
            .filter(|&count| count > 0)
            .ok_or(LayoutDecodeError::MalformedShards)?;
        let mut journal_ids = Vec::with_capacity(shard_count);
        for shard in 0..shard_count {
            let id = lines
                .next()
                .and_then(|line| line.strip_prefix(&format!("journal {shard} ")))
                .filter(|hex| hex.len() == 16)
                .and_then(|hex| u64::from_str_radix(hex, 16).ok())
                .ok_or(LayoutDecodeError::MalformedJournal { shard })?;
            journal_ids.push(id);
        }
        if lines.next().is_some() {
            return Err(LayoutDecodeError::UnexpectedLines);
        }
        let layout = Layout {
            shard_count,
            journal_ids,
        };
        // Canonical: exactly what tern writes (hex case, padding, endings).
        if layout.encode() != text {
            return Err(LayoutDecodeError::NotCanonical);
        }
        Ok(layout)
    }
}

/// Why a layout file's text does not decode (the reason in
/// [`LayoutError::Damaged`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutDecodeError {
    /// Larger than any layout tern writes: not read.
    #[error("{0} bytes")]
    TooLarge(u64),
    #[error("no checksum line")]
    NoChecksum,
    #[error("malformed checksum line")]
    MalformedChecksum,
    #[error("checksum mismatch")]
    ChecksumMismatch,
    #[error("unknown version line")]
    UnknownVersion,
    #[error("malformed shards line")]
    MalformedShards,
    #[error("malformed journal line for shard {shard}")]
    MalformedJournal { shard: usize },
    #[error("unexpected lines")]
    UnexpectedLines,
    #[error("not in canonical form")]
    NotCanonical,
}

/// Where each shard's journal lives.
pub fn journal_directory(journal_dir: &Path, shard: usize) -> PathBuf {
    journal_dir.join(format!("shard-{shard}"))
}

/// Reads the store's layout, or creates it for a store without JetStream
/// data; refuses a store written with another shard count, a damaged or
/// missing layout beside data, and the format of an earlier version.
pub fn open(
    store_dir: &Path,
    journal_dir: &Path,
    journal_segments: u32,
    shard_count: usize,
    mut random: impl FnMut() -> u64,
) -> Result<Layout, LayoutError> {
    let root = store_dir.join("jetstream");
    std::fs::create_dir_all(&root).map_err(|source| LayoutError::Io {
        path: root.display().to_string(),
        source,
    })?;
    let Some(layout) = read(store_dir, journal_dir, journal_segments)? else {
        let layout = Layout {
            shard_count,
            journal_ids: (0..shard_count).map(|_| journal_id(&mut random)).collect(),
        };
        write(&root, &layout)?;
        return Ok(layout);
    };
    if layout.shard_count != shard_count {
        return Err(LayoutError::ShardCount {
            root: root.display().to_string(),
            found: layout.shard_count,
            wanted: shard_count,
        });
    }
    Ok(layout)
}

/// Reads the store's layout without changing anything. `Ok(None)`: there
/// is none and the store holds no JetStream data (a layout may be created).
pub fn read(
    store_dir: &Path,
    journal_dir: &Path,
    journal_segments: u32,
) -> Result<Option<Layout>, LayoutError> {
    let root = store_dir.join("jetstream");
    let io = |path: &Path| {
        let path = path.display().to_string();
        move |source| LayoutError::Io { path, source }
    };
    let path = root.join(FILE);
    let store = store_dir.display().to_string();
    let text = match std::fs::metadata(&path) {
        Ok(meta) if meta.len() > LAYOUT_BYTES_MAX => {
            return Err(LayoutError::Damaged {
                path: path.display().to_string(),
                store,
                reason: LayoutDecodeError::TooLarge(meta.len()),
            })
        }
        Ok(_) => Some(std::fs::read(&path).map_err(io(&path))?),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => None,
        Err(error) => return Err(io(&path)(error)),
    };
    let Some(bytes) = text else {
        if let Some(evidence) = data_evidence(&root, journal_dir, journal_segments) {
            return Err(LayoutError::Missing {
                path: path.display().to_string(),
                store,
                evidence,
            });
        }
        return Ok(None);
    };
    let text = String::from_utf8_lossy(&bytes);
    if text.starts_with("shards ") && text.lines().count() == 1 {
        return Err(LayoutError::OldFormat {
            path: path.display().to_string(),
        });
    }
    Layout::decode(&text)
        .map(Some)
        .map_err(|reason| LayoutError::Damaged {
            path: path.display().to_string(),
            store,
            reason,
        })
}

/// A journal id: random, never 0 (0 reads as "no id" in a zeroed block).
pub(crate) fn journal_id(mut random: impl FnMut() -> u64) -> u64 {
    loop {
        let id = random();
        if id != 0 {
            return id;
        }
    }
}

/// What shows the store holds JetStream data (a stream directory, a
/// journal segment), or `None`.
pub(crate) fn data_evidence(
    root: &Path,
    journal_dir: &Path,
    journal_segments: u32,
) -> Option<String> {
    let streams = root.join("streams");
    if let Ok(entries) = std::fs::read_dir(&streams) {
        let mut names: Vec<String> = entries
            .filter_map(|entry| entry.ok())
            .filter(|entry| entry.path().is_dir())
            .filter_map(|entry| entry.file_name().into_string().ok())
            .filter(|name| !name.starts_with('.'))
            .collect();
        names.sort();
        if let Some(name) = names.first() {
            return Some(format!("stream directory {}", streams.join(name).display()));
        }
    }
    if let Ok(entries) = std::fs::read_dir(root) {
        let mut markers: Vec<PathBuf> = entries
            .filter_map(|entry| entry.ok())
            .map(|entry| entry.path())
            .filter(|path| {
                path.file_name()
                    .and_then(|name| name.to_str())
                    .is_some_and(is_formatted_marker)
            })
            .collect();
        markers.sort();
        if let Some(marker) = markers.first() {
            return Some(format!("{} (a journal was formatted)", marker.display()));
        }
    }
    let shards = std::fs::read_dir(journal_dir).ok()?;
    let mut directories: Vec<PathBuf> = shards
        .filter_map(|entry| entry.ok())
        .map(|entry| entry.path())
        .filter(|path| path.is_dir())
        .collect();
    directories.sort();
    directories
        .into_iter()
        .find(|directory| DmaDevice::directory_has_segments(directory, journal_segments))
        .map(|directory| format!("journal segments in {}", directory.display()))
}

/// `<root>/journal-<shard>.formatted`: present once shard `shard`'s
/// journal has been formatted (its first segment header durable). From then
/// on a journal holding nothing of its id was erased, not new. Only the
/// file's existence counts; it holds `journal <id in hex>\n` for a reader.
pub fn formatted_marker(root: &Path, shard: usize) -> PathBuf {
    root.join(format!("journal-{shard}.formatted"))
}

/// Whether a file name is a [`formatted_marker`]'s.
fn is_formatted_marker(name: &str) -> bool {
    name.strip_prefix("journal-")
        .and_then(|rest| rest.strip_suffix(".formatted"))
        .is_some_and(|shard| shard.parse::<usize>().is_ok())
}

/// Records that shard `shard`'s journal is formatted: the marker written,
/// synced, and its directory synced.
pub fn record_formatted(root: &Path, shard: usize, journal_id: u64) -> std::io::Result<()> {
    let path = formatted_marker(root, shard);
    std::fs::write(&path, format!("journal {journal_id:016x}\n"))
        .and_then(|()| std::fs::File::open(&path)?.sync_all())
        .and_then(|()| std::fs::File::open(root)?.sync_all())
}

/// Replaces `<root>/layout` atomically (temporary file, sync, rename,
/// directory sync).
pub(crate) fn write(root: &Path, layout: &Layout) -> Result<(), LayoutError> {
    let path = root.join(FILE);
    let temporary = root.join("layout.tmp");
    std::fs::write(&temporary, layout.encode())
        .and_then(|()| std::fs::File::open(&temporary)?.sync_all())
        .and_then(|()| std::fs::rename(&temporary, &path))
        .and_then(|()| std::fs::File::open(root)?.sync_all())
        .map_err(|source| LayoutError::Io {
            path: path.display().to_string(),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counter() -> impl FnMut() -> u64 {
        let mut next = 0x1000;
        move || {
            next += 1;
            next
        }
    }

    #[test]
    fn layout_round_trips_and_every_changed_byte_is_caught() {
        let layout = Layout {
            shard_count: 2,
            journal_ids: vec![0x4f1c_2a9e_0b7d_3c55, 7],
        };
        let text = layout.encode();
        assert_eq!(Layout::decode(&text), Ok(layout));
        let bytes = text.as_bytes();
        for at in 0..bytes.len() {
            for bit in 0..8 {
                let mut damaged = bytes.to_vec();
                damaged[at] ^= 1 << bit;
                let Ok(damaged) = String::from_utf8(damaged) else {
                    continue;
                };
                assert!(Layout::decode(&damaged).is_err(), "byte {at} bit {bit}");
            }
        }
        assert!(Layout::decode(&text[..text.len() - 3]).is_err());
    }

    #[test]
    fn a_store_gets_a_layout_once_and_refuses_changes() {
        let directory = tempfile::tempdir().unwrap();
        let store = directory.path();
        let journals = store.join("jetstream").join("journal");
        let created = open(store, &journals, 4, 2, counter()).unwrap();
        assert_eq!(created.journal_ids, vec![0x1001, 0x1002]);
        assert_eq!(open(store, &journals, 4, 2, counter()).unwrap(), created);
        assert!(matches!(
            open(store, &journals, 4, 1, counter()),
            Err(LayoutError::ShardCount {
                found: 2,
                wanted: 1,
                ..
            })
        ));
    }

    #[test]
    fn a_missing_layout_beside_data_is_refused() {
        let directory = tempfile::tempdir().unwrap();
        let store = directory.path();
        let journals = store.join("jetstream").join("journal");
        open(store, &journals, 4, 2, counter()).unwrap();
        std::fs::create_dir_all(store.join("jetstream/streams/ORDERS")).unwrap();
        std::fs::remove_file(store.join("jetstream/layout")).unwrap();
        let error = open(store, &journals, 4, 2, counter()).unwrap_err();
        assert!(matches!(error, LayoutError::Missing { .. }), "{error}");
        assert!(error.to_string().contains("ORDERS"), "{error}");
        assert!(!store.join("jetstream/layout").exists(), "nothing written");
        // Journal segments alone are data too.
        std::fs::remove_dir(store.join("jetstream/streams/ORDERS")).unwrap();
        std::fs::create_dir_all(journals.join("shard-1")).unwrap();
        std::fs::write(journals.join("shard-1/journal-000002.seg"), b"x").unwrap();
        let error = open(store, &journals, 4, 2, counter()).unwrap_err();
        assert!(error.to_string().contains("shard-1"), "{error}");
    }

    #[test]
    fn damaged_and_old_layouts_are_refused_by_name() {
        let directory = tempfile::tempdir().unwrap();
        let store = directory.path();
        let journals = store.join("jetstream").join("journal");
        open(store, &journals, 4, 2, counter()).unwrap();
        let path = store.join("jetstream/layout");
        let mut text = std::fs::read(&path).unwrap();
        text[12] ^= 1;
        std::fs::write(&path, &text).unwrap();
        let error = open(store, &journals, 4, 2, counter()).unwrap_err();
        assert!(matches!(error, LayoutError::Damaged { .. }), "{error}");
        assert!(error.to_string().contains("jetstream/layout"), "{error}");
        std::fs::write(&path, "shards 2\n").unwrap();
        assert!(matches!(
            open(store, &journals, 4, 2, counter()),
            Err(LayoutError::OldFormat { .. })
        ));
    }
}
