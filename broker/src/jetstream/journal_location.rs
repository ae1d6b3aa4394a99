//! Where each shard's journal lives: a directory `<journal_dir>/shard-<i>`
//! of segment files, or a region of one raw block device shared by every
//! shard (`tern_storage::journal_device` lays it out).
//!
//! For a raw device, [`prepare_device`] runs once at start-up, before the
//! shards: it opens the device exclusively (nothing can mount it while the
//! server runs), then either verifies its header against the store's
//! layout (the same journal ids, so the same store; the same shard count,
//! segment geometry and server name) or, for a store without JetStream
//! data and a device without a header or any other signature, formats it.
//! A mismatch refuses to start and never reformats.

use std::path::{Path, PathBuf};

use tern_storage::journal_device::{Contents, DeviceHeader, JournalDevice, JournalDeviceError};

use crate::config::JetStreamConfig;
use crate::jetstream::layout::{self, Layout};

/// One shard's journal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JournalLocation {
    Directory(PathBuf),
    Region {
        device: PathBuf,
        shard: usize,
        offset: u64,
    },
}

impl JournalLocation {
    /// Shard `shard`'s journal under `config`.
    pub fn of(config: &JetStreamConfig, shard: usize) -> JournalLocation {
        match config.journal_regions.get(shard) {
            Some(&offset) => JournalLocation::Region {
                device: config.journal_dir.clone(),
                shard,
                offset,
            },
            None => {
                JournalLocation::Directory(layout::journal_directory(&config.journal_dir, shard))
            }
        }
    }
}

impl std::fmt::Display for JournalLocation {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JournalLocation::Directory(directory) => write!(formatter, "{}", directory.display()),
            JournalLocation::Region {
                device,
                shard,
                offset,
            } => write!(
                formatter,
                "{} (shard {shard}'s region at byte {offset})",
                device.display()
            ),
        }
    }
}

/// Whether `journal_dir` names a block device (a raw journal).
pub fn is_device(journal_dir: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(journal_dir).is_ok_and(|meta| meta.file_type().is_block_device())
}

#[derive(Debug, thiserror::Error)]
pub enum DeviceRefusal {
    #[error("journal device: {0}")]
    Device(#[from] JournalDeviceError),
    #[error(
        "journal device {path} has no tern journal header, but the store in {store} holds \
         JetStream data ({evidence}): its journal was elsewhere, or this is another device. \
         Nothing was changed"
    )]
    NoHeader {
        path: String,
        store: String,
        evidence: String,
    },
    #[error(
        "journal device {path} holds the journal of another store (journal ids {found:x?}, \
         the store in {store} has {wanted:x?}); nothing was changed"
    )]
    OtherStore {
        path: String,
        store: String,
        found: Vec<u64>,
        wanted: Vec<u64>,
    },
    #[error(
        "journal device {path} was laid out for {found} shard(s); this server runs {wanted}. \
         Start it on the same number of cores (--cores); nothing was changed"
    )]
    ShardCount {
        path: String,
        found: usize,
        wanted: usize,
    },
    #[error(
        "journal device {path} was laid out with {found_segments} segments of {found_bytes} \
         bytes per shard; the configuration asks for {wanted_segments} of {wanted_bytes} \
         (journal_segments, journal_segment_size): set them back; nothing was changed"
    )]
    Geometry {
        path: String,
        found_segments: u32,
        found_bytes: u64,
        wanted_segments: u32,
        wanted_bytes: u64,
    },
    #[error(
        "journal device {path} belongs to server {found:?}; this server is {wanted:?} \
         (server_name); nothing was changed"
    )]
    OtherServer {
        path: String,
        found: String,
        wanted: String,
    },
}

/// The raw journal device, prepared: keep it (it holds the device
/// exclusively) while the server runs.
pub struct PreparedDevice {
    pub device: JournalDevice,
    pub header: DeviceHeader,
    /// Whether this start formatted it.
    pub formatted: bool,
}

impl PreparedDevice {
    /// Each shard's region offset, for [`JetStreamConfig::journal_regions`].
    pub fn region_offsets(&self) -> Vec<u64> {
        (0..self.header.shard_count())
            .map(|shard| self.header.region_offset(shard))
            .collect()
    }
}

/// Opens, verifies or formats the raw journal device `config.journal_dir`
/// for the store `store_dir` whose layout is `layout`.
pub fn prepare_device(
    store_dir: &Path,
    config: &JetStreamConfig,
    layout: &Layout,
    server_name: Option<&str>,
    mut random: impl FnMut() -> u64,
) -> Result<PreparedDevice, DeviceRefusal> {
    let path = &config.journal_dir;
    let shown = path.display().to_string();
    let device = JournalDevice::open(path)?;
    let wanted = DeviceHeader {
        device_bytes: device.facts().bytes,
        device_id: layout::journal_id(&mut random),
        segments: config.journal_segments,
        segment_bytes: config.journal_segment_bytes,
        server_name: server_name.unwrap_or_default().to_string(),
        journal_ids: layout.journal_ids.clone(),
    };
    let (header, formatted) = match device.contents()? {
        Contents::Empty => {
            let root = store_dir.join("jetstream");
            if let Some(evidence) = layout::data_evidence(&root, path, config.journal_segments) {
                return Err(DeviceRefusal::NoHeader {
                    path: shown,
                    store: store_dir.display().to_string(),
                    evidence,
                });
            }
            if device.facts().bytes < wanted.bytes_needed() {
                return Err(device.too_small(&wanted).into());
            }
            device.format(&wanted)?;
            log::info!(target: "tern::jetstream", "journal device {shown}: formatted for {} shard(s), {} segments of {} bytes each (device id {:016x})", wanted.shard_count(), wanted.segments, wanted.segment_bytes, wanted.device_id);
            (wanted, true)
        }
        Contents::Tern { header, repaired } => {
            if repaired {
                log::warn!(target: "tern::jetstream", "journal device {shown}: one copy of the device header was damaged and was rewritten from the other");
            }
            if header.shard_count() != layout.shard_count {
                return Err(DeviceRefusal::ShardCount {
                    path: shown,
                    found: header.shard_count(),
                    wanted: layout.shard_count,
                });
            }
            if header.journal_ids != layout.journal_ids {
                return Err(DeviceRefusal::OtherStore {
                    path: shown,
                    store: store_dir.display().to_string(),
                    found: header.journal_ids,
                    wanted: layout.journal_ids.clone(),
                });
            }
            if (header.segments, header.segment_bytes) != (wanted.segments, wanted.segment_bytes) {
                return Err(DeviceRefusal::Geometry {
                    path: shown,
                    found_segments: header.segments,
                    found_bytes: header.segment_bytes,
                    wanted_segments: wanted.segments,
                    wanted_bytes: wanted.segment_bytes,
                });
            }
            if header.server_name != wanted.server_name {
                return Err(DeviceRefusal::OtherServer {
                    path: shown,
                    found: header.server_name,
                    wanted: wanted.server_name,
                });
            }
            if device.facts().bytes < header.bytes_needed() {
                return Err(device.too_small(&header).into());
            }
            (header, false)
        }
    };
    let facts = device.facts();
    log::info!(target: "tern::jetstream", "journal device {shown}: {} bytes, logical/physical blocks {}/{} bytes, durable writes are {}", facts.bytes, facts.logical_block_bytes, facts.physical_block_bytes, facts.durable_write());
    if facts.physical_block_bytes as usize > tern_storage::format::BLOCK_BYTES {
        log::warn!(target: "tern::jetstream", "journal device {shown}: physical block size {} is larger than the journal's 4096-byte blocks: the device reads and rewrites around each write", facts.physical_block_bytes);
    }
    Ok(PreparedDevice {
        device,
        header,
        formatted,
    })
}
