//! File damage on a stopped node: which of its files a [`DamageTarget`]
//! names, per server, and the bit flip, truncation or deletion itself.
//! A bit flip lands inside the written part of the file (journal
//! segments are preallocated: a flip in their zeroed tail would test
//! nothing).
//!
//! | target | tern-server | nats-server |
//! |---|---|---|
//! | journal | `jetstream/journal/shard-*/journal-*.seg` | Raft WALs: `$SYS/_js_/*/msgs/*.blk` |
//! | block store | `jetstream/streams/*/messages*/*.blk` | `streams/*/msgs/*.blk` |
//! | snapshot | `streams/*/consumers`, `messages/deletes.log` | `*/snapshots/*` |
//! | meta | `layout`, `meta/state`, `votes/shard-*/votes`, `streams/*/config`, `streams/*/raft` | every other file |

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::nemesis::{DamageAction, DamageTarget};
use crate::random::Random;

#[derive(Debug, thiserror::Error)]
pub enum DamageError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("no file to damage under {0}")]
    Nothing(String),
}

/// What was done, for the report.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Damage {
    pub path: String,
    pub detail: String,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> DamageError + '_ {
    move |source| DamageError::Io {
        path: path.display().to_string(),
        source,
    }
}

pub fn classify(tern: bool, relative: &str) -> DamageTarget {
    if tern {
        if relative.contains("/journal/shard-") && relative.ends_with(".seg") {
            DamageTarget::Journal
        } else if relative.contains("/messages") && relative.ends_with(".blk") {
            // `messages/`, or `messages.<generation>/` after a snapshot.
            DamageTarget::BlockStore
        } else if relative.ends_with("/consumers") || relative.ends_with("/deletes.log") {
            DamageTarget::Snapshot
        } else {
            DamageTarget::Meta
        }
    } else if relative.contains("/snapshots/") {
        DamageTarget::Snapshot
    } else if relative.contains("/_js_/") && relative.ends_with(".blk") {
        DamageTarget::Journal
    } else if relative.contains("/streams/") && relative.ends_with(".blk") {
        DamageTarget::BlockStore
    } else {
        DamageTarget::Meta
    }
}

fn files(root: &Path) -> Result<Vec<PathBuf>, DamageError> {
    let mut found = Vec::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).map_err(io(&dir))? {
            let entry = entry.map_err(io(&dir))?;
            let kind = entry.file_type().map_err(io(&dir))?;
            if kind.is_dir() {
                pending.push(entry.path());
            } else if kind.is_file() {
                found.push(entry.path());
            }
        }
    }
    found.sort();
    Ok(found)
}

/// Damages one file of `target` under `store_dir` (any file when none is
/// of that kind, said in the detail); `seed` picks the file and the spot.
pub fn damage(
    tern: bool,
    store_dir: &Path,
    target: DamageTarget,
    action: DamageAction,
    seed: u64,
) -> Result<Damage, DamageError> {
    let mut random = Random::new(seed);
    let all = files(store_dir)?;
    let relative = |path: &Path| {
        path.strip_prefix(store_dir)
            .unwrap_or(path)
            .display()
            .to_string()
    };
    // tern's copies kept aside after a rebuild (streams) or a replaced
    // journal are not live data.
    let all: Vec<PathBuf> = all
        .into_iter()
        .filter(|path| {
            let relative = relative(path);
            !relative.starts_with("jetstream/damaged/")
                && !relative.starts_with("jetstream/journal/damaged/")
        })
        .collect();
    let wanted: Vec<&PathBuf> = all
        .iter()
        .filter(|path| classify(tern, &format!("/{}", relative(path))) == target)
        .collect();
    let (candidates, fallback) = if wanted.is_empty() {
        (
            all.iter().collect::<Vec<_>>(),
            format!(" (no {target:?} file: any file)"),
        )
    } else {
        (wanted, String::new())
    };
    if candidates.is_empty() {
        return Err(DamageError::Nothing(store_dir.display().to_string()));
    }
    let path = *random.pick(&candidates);
    let length = std::fs::metadata(path).map_err(io(path))?.len();
    let detail = match action {
        DamageAction::Delete => {
            std::fs::remove_file(path).map_err(io(path))?;
            format!("deleted ({length} bytes){fallback}")
        }
        DamageAction::Truncate => {
            let new_length = if length == 0 { 0 } else { random.below(length) };
            let file = std::fs::OpenOptions::new()
                .write(true)
                .open(path)
                .map_err(io(path))?;
            file.set_len(new_length).map_err(io(path))?;
            file.sync_all().map_err(io(path))?;
            format!("truncated from {length} to {new_length} bytes{fallback}")
        }
        DamageAction::FlipBit => {
            let written = written_length(path)?;
            if written == 0 {
                format!("empty: nothing to flip{fallback}")
            } else {
                let offset = random.below(written);
                let bit = random.below(8) as u8;
                let mut file = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(path)
                    .map_err(io(path))?;
                let mut byte = [0u8];
                file.seek(SeekFrom::Start(offset)).map_err(io(path))?;
                file.read_exact(&mut byte).map_err(io(path))?;
                byte[0] ^= 1 << bit;
                file.seek(SeekFrom::Start(offset)).map_err(io(path))?;
                file.write_all(&byte).map_err(io(path))?;
                file.sync_all().map_err(io(path))?;
                format!("bit {bit} of byte {offset} flipped (of {written} written bytes){fallback}")
            }
        }
    };
    Ok(Damage {
        path: relative(path),
        detail,
    })
}

/// The file's length up to the end of its last 4 KiB block holding a
/// non-zero byte.
fn written_length(path: &Path) -> Result<u64, DamageError> {
    const BLOCK: usize = 4096;
    let mut file = std::fs::File::open(path).map_err(io(path))?;
    let mut buffer = vec![0u8; 1 << 20];
    let mut offset = 0u64;
    let mut written = 0u64;
    loop {
        let read = file.read(&mut buffer).map_err(io(path))?;
        if read == 0 {
            return Ok(written);
        }
        for (index, block) in buffer[..read].chunks(BLOCK).enumerate() {
            if block.iter().any(|&byte| byte != 0) {
                written = offset + (index * BLOCK + block.len()) as u64;
            }
        }
        offset += read as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_map_to_their_targets() {
        let tern = [
            (
                "/jetstream/journal/shard-1/journal-000003.seg",
                DamageTarget::Journal,
            ),
            (
                "/jetstream/streams/S/messages/00000000000000000001.blk",
                DamageTarget::BlockStore,
            ),
            (
                "/jetstream/streams/S/messages.3/00000000000000000007.blk",
                DamageTarget::BlockStore,
            ),
            ("/jetstream/streams/S/consumers", DamageTarget::Snapshot),
            ("/jetstream/streams/S/raft", DamageTarget::Meta),
            ("/jetstream/layout", DamageTarget::Meta),
        ];
        for (path, target) in tern {
            assert_eq!(classify(true, path), target, "{path}");
        }
        let nats = [
            (
                "/jetstream/$SYS/_js_/S-R3F-abc/msgs/1.blk",
                DamageTarget::Journal,
            ),
            (
                "/jetstream/$SYS/_js_/S-R3F-abc/snapshots/snap.1.2",
                DamageTarget::Snapshot,
            ),
            (
                "/jetstream/$G/streams/S/msgs/1.blk",
                DamageTarget::BlockStore,
            ),
            ("/jetstream/$G/streams/S/meta.inf", DamageTarget::Meta),
        ];
        for (path, target) in nats {
            assert_eq!(classify(false, path), target, "{path}");
        }
    }

    #[test]
    fn a_flip_lands_in_the_written_part_and_changes_one_bit() {
        let dir = tempfile::tempdir().unwrap();
        let segment = dir
            .path()
            .join("jetstream/journal/shard-0/journal-000000.seg");
        std::fs::create_dir_all(segment.parent().unwrap()).unwrap();
        let mut bytes = vec![0u8; 1 << 20];
        bytes[..10_000].fill(0xAB);
        std::fs::write(&segment, &bytes).unwrap();
        for seed in 0..20 {
            let before = std::fs::read(&segment).unwrap();
            let done = damage(
                true,
                dir.path(),
                DamageTarget::Journal,
                DamageAction::FlipBit,
                seed,
            )
            .unwrap();
            let after = std::fs::read(&segment).unwrap();
            let changed: Vec<usize> = (0..before.len())
                .filter(|&i| before[i] != after[i])
                .collect();
            assert_eq!(changed.len(), 1, "{done:?}");
            assert!(changed[0] < 12_288, "{done:?}");
            assert_eq!((before[changed[0]] ^ after[changed[0]]).count_ones(), 1);
        }
        let done = damage(
            true,
            dir.path(),
            DamageTarget::Snapshot,
            DamageAction::Truncate,
            1,
        )
        .unwrap();
        assert!(done.detail.contains("no Snapshot file"), "{done:?}");
        assert!(std::fs::metadata(&segment).unwrap().len() < 1 << 20);
        damage(
            true,
            dir.path(),
            DamageTarget::Journal,
            DamageAction::Delete,
            1,
        )
        .unwrap();
        assert!(!segment.exists());
    }
}
