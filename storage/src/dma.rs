//! The journal device on real storage, O_DIRECT through glommio's io_uring:
//! either a directory of preallocated segment files, or a raw block device
//! (a whole NVMe namespace) cut into equal segments.
//!
//! At open it proves O_DIRECT is really in effect (the `flags` line of
//! `/proc/self/fdinfo`) and that 4096-byte blocks satisfy the device's
//! alignment, and refuses to run otherwise. glommio's `dma_open` decides
//! O_DIRECT from `statfs` of the path, which for `/dev/*` is devtmpfs: it would
//! silently open a block device without O_DIRECT. So tern asks for O_DIRECT
//! itself and checks the result, and takes the block size from the device
//! (BLKSSZGET), not from glommio.
//!
//! Segment files are filled with zeros when created: overwriting written
//! blocks needs no metadata update at fdatasync, whereas writing into
//! fallocated (unwritten) extents does (measured: see `benches/journal.rs`).

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use glommio::io::{DmaBuffer, DmaFile, OpenOptions};

use crate::device::{Device, DeviceError, IoBuffer};
use crate::format::BLOCK_BYTES;

/// How `durable` writes reach stable storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncMethod {
    /// `write` then `fdatasync`.
    Fdatasync,
    /// The file is opened `O_DSYNC`: each write is durable when it completes.
    /// (Non-durable writes are then durable too: this method is for `sync = always`.)
    Dsync,
}

impl SyncMethod {
    /// The method for a journal policy: O_DSYNC measured faster than
    /// write + fdatasync for `always` (see docs/benchmarks-history.md); `never` writes
    /// without syncing, so it must not open files O_DSYNC.
    pub fn for_policy(policy: crate::journal::SyncPolicy) -> SyncMethod {
        match policy {
            crate::journal::SyncPolicy::Always => SyncMethod::Dsync,
            crate::journal::SyncPolicy::Never => SyncMethod::Fdatasync,
        }
    }
}

/// Bytes zeroed per write when preallocating a segment file.
const ZERO_FILL_CHUNK_BYTES: usize = 1 << 20;

/// A DMA buffer as the journal's write buffer.
pub struct DmaBuf(DmaBuffer);

impl DmaBuf {
    /// An unzeroed DMA buffer of `bytes`.
    pub fn allocate(bytes: usize) -> DmaBuf {
        DmaBuf(glommio::allocate_dma_buffer(bytes))
    }

    pub fn into_inner(self) -> DmaBuffer {
        self.0
    }
}

impl IoBuffer for DmaBuf {
    fn bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        self.0.as_bytes_mut()
    }

    fn truncate(&mut self, len: usize) {
        assert!(len % BLOCK_BYTES == 0);
        self.0.trim_to_size(len);
    }
}

/// What a read returns.
pub struct DmaRead(glommio::io::ReadResult);

impl DmaRead {
    pub fn new(result: glommio::io::ReadResult) -> DmaRead {
        DmaRead(result)
    }
}

impl AsRef<[u8]> for DmaRead {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

enum Layout {
    /// One file per segment.
    Files(Vec<DmaFile>),
    /// Segment `i` at byte `base + i * segment_bytes` of one device.
    Region { file: DmaFile, base: u64 },
}

pub struct DmaDevice {
    layout: Layout,
    segment_count: u32,
    segment_bytes: u64,
    sync: SyncMethod,
    description: String,
}

fn error(
    operation: &'static str,
    segment: u32,
    offset: u64,
    message: impl ToString,
) -> DeviceError {
    DeviceError {
        operation,
        segment,
        offset,
        message: message.to_string(),
    }
}

/// Whether `fd` was opened with O_DIRECT, from `/proc/self/fdinfo/<fd>`.
pub fn o_direct_in_effect(fd: i32) -> std::io::Result<bool> {
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}"))?;
    let flags = info
        .lines()
        .find_map(|line| line.strip_prefix("flags:"))
        .and_then(|octal| u32::from_str_radix(octal.trim(), 8).ok())
        .ok_or_else(|| std::io::Error::other("no flags line in fdinfo"))?;
    Ok(flags & libc::O_DIRECT as u32 != 0)
}

fn open_flags(sync: SyncMethod) -> i32 {
    let mut flags = libc::O_DIRECT;
    if sync == SyncMethod::Dsync {
        flags |= libc::O_DSYNC;
    }
    flags
}

async fn open_direct(path: &Path, create: bool, sync: SyncMethod) -> Result<DmaFile, DeviceError> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(create)
        .custom_flags(open_flags(sync))
        .dma_open(path)
        .await
        .map_err(|e| error("open", 0, 0, format!("{}: {e}", path.display())))?;
    let direct = o_direct_in_effect(file.as_raw_fd()).map_err(|e| error("open", 0, 0, e))?;
    if !direct {
        return Err(error(
            "open",
            0,
            0,
            format!("{}: O_DIRECT is not in effect (does the filesystem support direct I/O? tmpfs does not)", path.display()),
        ));
    }
    Ok(file)
}

impl DmaDevice {
    /// A directory of `segment_count` segment files of `segment_bytes` each.
    /// A journal with no segment file yet is created (zero-filled); one
    /// with only some of them, or a file of another size, is refused with
    /// [`DeviceError`] naming the file: a missing or shortened segment may
    /// have held acknowledged records, so it is never recreated silently.
    pub async fn open_directory(
        directory: &Path,
        segment_count: u32,
        segment_bytes: u64,
        sync: SyncMethod,
    ) -> Result<DmaDevice, DeviceError> {
        assert!(segment_bytes as usize % BLOCK_BYTES == 0);
        std::fs::create_dir_all(directory).map_err(|e| {
            error(
                "create directory",
                0,
                0,
                format!("{}: {e}", directory.display()),
            )
        })?;
        if let Some(damage) = Self::segment_files_damage(directory, segment_count, segment_bytes) {
            return Err(error("open", 0, 0, damage));
        }
        let fresh = !Self::directory_has_segments(directory, segment_count)
            || (0..segment_count).any(|segment| new_segment_path(directory, segment).exists());
        probe_direct_io(directory).await?;
        if fresh {
            format_directory(directory, segment_count, segment_bytes).await?;
        }
        let mut files = Vec::with_capacity(segment_count as usize);
        for segment in 0..segment_count {
            let path = segment_path(directory, segment);
            let file = open_direct(&path, false, sync)
                .await
                .map_err(|e| DeviceError { segment, ..e })?;
            check_alignment(&file, segment)?;
            files.push(file);
        }
        Ok(DmaDevice {
            layout: Layout::Files(files),
            segment_count,
            segment_bytes,
            sync,
            description: directory.display().to_string(),
        })
    }

    /// Whether `directory` holds any journal segment file (a journal that
    /// was ever created there).
    pub fn directory_has_segments(directory: &Path, segment_count: u32) -> bool {
        (0..segment_count).any(|segment| segment_path(directory, segment).exists())
    }

    /// What is wrong with a journal directory's segment files, if anything:
    /// some missing while others exist, or one of another size. `None` for
    /// a complete set, for no set at all (a journal to create), and for an
    /// interrupted format (`.new` files: nothing was ever written).
    pub fn segment_files_damage(
        directory: &Path,
        segment_count: u32,
        segment_bytes: u64,
    ) -> Option<String> {
        let formatting =
            (0..segment_count).any(|segment| new_segment_path(directory, segment).exists());
        if formatting || !Self::directory_has_segments(directory, segment_count) {
            return None;
        }
        (0..segment_count).find_map(|segment| {
            let path = segment_path(directory, segment);
            match std::fs::metadata(&path).map(|meta| meta.len()) {
                Err(_) => Some(format!(
                    "{} is missing while the journal's other segments exist: it may have held acknowledged records",
                    path.display()
                )),
                Ok(length) if length != segment_bytes => Some(format!(
                    "{} is {length} bytes, expected {segment_bytes}: truncated or resized, refusing to use it",
                    path.display()
                )),
                Ok(_) => None,
            }
        })
    }

    /// A region of a raw block device (one shard's, laid out by
    /// [`crate::journal_device`]): `segment_count` segments of
    /// `segment_bytes` from byte `base`. Opened with O_DIRECT by tern and
    /// checked (fdinfo, BLKSSZGET), not left to glommio's guess.
    pub async fn open_region(
        path: &Path,
        base: u64,
        segment_count: u32,
        segment_bytes: u64,
        sync: SyncMethod,
        description: String,
    ) -> Result<DmaDevice, DeviceError> {
        assert!(segment_bytes as usize % BLOCK_BYTES == 0 && base as usize % BLOCK_BYTES == 0);
        assert!(segment_count >= 2);
        let file = open_direct(path, false, sync).await?;
        let fd = file.as_raw_fd();
        let logical = block_ioctl_u32(fd, BLKSSZGET)
            .map_err(|e| error("open", 0, 0, format!("BLKSSZGET: {e}")))?;
        if logical as usize > BLOCK_BYTES || BLOCK_BYTES % logical as usize != 0 {
            return Err(error(
                "open",
                0,
                0,
                format!("logical block size {logical} does not divide {BLOCK_BYTES}"),
            ));
        }
        let size = block_ioctl_u64(fd, BLKGETSIZE64)
            .map_err(|e| error("open", 0, 0, format!("BLKGETSIZE64: {e}")))?;
        let end = base + u64::from(segment_count) * segment_bytes;
        if size < end {
            return Err(error(
                "open",
                0,
                0,
                format!("{}: {size} bytes, the region ends at {end}", path.display()),
            ));
        }
        Ok(DmaDevice {
            layout: Layout::Region { file, base },
            segment_count,
            segment_bytes,
            sync,
            description,
        })
    }

    pub fn description(&self) -> &str {
        &self.description
    }

    fn locate(&self, segment: u32, offset: u64) -> (&DmaFile, u64) {
        assert!(segment < self.segment_count && offset < self.segment_bytes);
        match &self.layout {
            Layout::Files(files) => (&files[segment as usize], offset),
            Layout::Region { file, base } => (
                file,
                base + u64::from(segment) * self.segment_bytes + offset,
            ),
        }
    }
}

/// glommio decides once per block device whether reads may use its polled
/// (IOPOLL) ring, by reading the first block of the first file opened there;
/// a new, empty file reads as "supported" and every later read fails with
/// EOPNOTSUPP on devices without polling. So the first file tern opens on a
/// device (per thread: each shard has its own reactor) is one that has
/// data: a regular file already in the directory holding at least a block
/// (a stream's `config`, a journal segment), or else a probe file written
/// for it.
///
/// A probe's name is unique per process, thread and call: shards probe the
/// same directory concurrently, and glommio panics if a file vanishes
/// between its open and its statfs. Probes a process left behind when it
/// died are removed by the next probe of that directory.
pub async fn probe_direct_io(directory: &Path) -> Result<(), DeviceError> {
    use std::os::unix::fs::MetadataExt;
    thread_local! {
        static PROBED_DEVICES: std::cell::RefCell<Vec<u64>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    static PROBES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let device = std::fs::metadata(directory)
        .map_err(|e| error("probe", 0, 0, format!("{}: {e}", directory.display())))?
        .dev();
    if PROBED_DEVICES.with(|probed| probed.borrow().contains(&device)) {
        return Ok(());
    }
    let own_prefix = format!("{PROBE_PREFIX}{}-", std::process::id());
    let mut existing = None;
    if let Ok(entries) = std::fs::read_dir(directory) {
        for entry in entries.filter_map(|entry| entry.ok()) {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with(PROBE_PREFIX) && !name.starts_with(&own_prefix) {
                let _ = std::fs::remove_file(entry.path());
                continue;
            }
            let holds_a_block = entry
                .metadata()
                .is_ok_and(|meta| meta.is_file() && meta.len() >= BLOCK_BYTES as u64);
            if existing.is_none() && holds_a_block && !name.starts_with('.') {
                existing = Some(entry.path());
            }
        }
    }
    let (path, created) = match existing {
        Some(path) => (path, false),
        None => {
            let probe = PROBES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let path = directory.join(format!("{own_prefix}{probe}"));
            std::fs::write(&path, vec![0u8; 2 * BLOCK_BYTES])
                .map_err(|e| error("probe", 0, 0, format!("{}: {e}", path.display())))?;
            (path, true)
        }
    };
    let opened = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .dma_open(&path)
        .await;
    if created {
        let _ = std::fs::remove_file(&path);
    }
    let file = opened.map_err(|e| error("probe", 0, 0, format!("{}: {e}", path.display())))?;
    let read = file.read_at_aligned(0, BLOCK_BYTES).await;
    let _ = file.close().await;
    read.map_err(|e| error("probe read", 0, 0, format!("{}: {e}", directory.display())))?;
    PROBED_DEVICES.with(|probed| probed.borrow_mut().push(device));
    Ok(())
}

/// Probe files start with this (hidden: never a store file).
pub const PROBE_PREFIX: &str = ".tern-direct-io-probe-";

pub fn segment_path(directory: &Path, segment: u32) -> PathBuf {
    directory.join(segment_file_name(segment))
}

/// The file name of segment `segment` of a journal directory.
pub fn segment_file_name(segment: u32) -> String {
    format!("journal-{segment:06}.seg")
}

fn new_segment_path(directory: &Path, segment: u32) -> PathBuf {
    directory.join(format!("journal-{segment:06}.seg.new"))
}

/// Creates every segment zero-filled as `.new` files, then renames them
/// into place (and syncs the directory), so an interrupted format leaves
/// either no segment file or `.new` files, never a partial journal that
/// would read as a damaged one.
async fn format_directory(
    directory: &Path,
    segment_count: u32,
    segment_bytes: u64,
) -> Result<(), DeviceError> {
    for segment in 0..segment_count {
        let path = new_segment_path(directory, segment);
        let file = open_direct(&path, true, SyncMethod::Fdatasync)
            .await
            .map_err(|e| DeviceError { segment, ..e })?;
        zero_fill(&file, segment, segment_bytes).await?;
        let _ = file.close().await;
    }
    for segment in 0..segment_count {
        std::fs::rename(
            new_segment_path(directory, segment),
            segment_path(directory, segment),
        )
        .map_err(|e| error("rename", segment, 0, e))?;
    }
    std::fs::File::open(directory)
        .and_then(|directory| directory.sync_all())
        .map_err(|e| error("sync directory", 0, 0, e))
}

fn check_alignment(file: &DmaFile, segment: u32) -> Result<(), DeviceError> {
    let alignment = file.alignment() as usize;
    if alignment > BLOCK_BYTES || BLOCK_BYTES % alignment != 0 {
        return Err(error(
            "open",
            segment,
            0,
            format!("direct I/O alignment {alignment} does not divide {BLOCK_BYTES}"),
        ));
    }
    Ok(())
}

async fn zero_fill(file: &DmaFile, segment: u32, segment_bytes: u64) -> Result<(), DeviceError> {
    let mut offset = 0u64;
    while offset < segment_bytes {
        let bytes = ZERO_FILL_CHUNK_BYTES.min((segment_bytes - offset) as usize);
        let mut buffer = glommio::allocate_dma_buffer(bytes);
        buffer.as_bytes_mut().fill(0);
        let written = file
            .write_at(buffer, offset)
            .await
            .map_err(|e| error("zero-fill", segment, offset, e))?;
        if written != bytes {
            return Err(error(
                "zero-fill",
                segment,
                offset,
                format!("short write of {written} bytes"),
            ));
        }
        offset += bytes as u64;
    }
    file.fdatasync()
        .await
        .map_err(|e| error("zero-fill sync", segment, 0, e))
}

pub(crate) const BLKSSZGET: libc::c_ulong = 0x1268;
pub(crate) const BLKPBSZGET: libc::c_ulong = 0x127b;
pub(crate) const BLKGETSIZE64: libc::c_ulong = 0x8008_1272;

pub(crate) fn block_ioctl_u32(fd: i32, request: libc::c_ulong) -> std::io::Result<u32> {
    let mut value: libc::c_int = 0;
    // SAFETY: the ioctl writes one int.
    let rc = unsafe { libc::ioctl(fd, request, &mut value) };
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(value as u32)
}

pub(crate) fn block_ioctl_u64(fd: i32, request: libc::c_ulong) -> std::io::Result<u64> {
    let mut value: u64 = 0;
    // SAFETY: the ioctl writes one u64.
    let rc = unsafe { libc::ioctl(fd, request, &mut value) };
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(value)
}

impl Device for DmaDevice {
    type Buffer = DmaBuf;
    type ReadBuffer = DmaRead;

    fn allocate(&self, bytes: usize) -> DmaBuf {
        assert!(bytes % BLOCK_BYTES == 0);
        // Not zeroed (a 1 MiB batch buffer per flush would cost tens of µs):
        // the journal writes every byte of what it sends, padding included.
        DmaBuf(glommio::allocate_dma_buffer(bytes))
    }

    fn segment_count(&self) -> u32 {
        self.segment_count
    }

    fn segment_bytes(&self) -> u64 {
        self.segment_bytes
    }

    fn segment_name(&self, segment: u32) -> String {
        match &self.layout {
            Layout::Files(_) => segment_file_name(segment),
            Layout::Region { .. } => format!("segment {segment} of {}", self.description),
        }
    }

    async fn write(
        &self,
        segment: u32,
        offset: u64,
        buffer: DmaBuf,
        durable: bool,
    ) -> Result<(), DeviceError> {
        let bytes = buffer.0.len();
        assert!(offset as usize % BLOCK_BYTES == 0 && bytes % BLOCK_BYTES == 0);
        assert!(offset + bytes as u64 <= self.segment_bytes);
        let (file, position) = self.locate(segment, offset);
        let written = file
            .write_rc_at(Rc::new(buffer.0), position)
            .await
            .map_err(|e| error("write", segment, offset, e))?;
        if written != bytes {
            return Err(error(
                "write",
                segment,
                offset,
                format!("short write: {written} of {bytes} bytes"),
            ));
        }
        if durable && self.sync == SyncMethod::Fdatasync {
            file.fdatasync()
                .await
                .map_err(|e| error("fdatasync", segment, offset, e))?;
        }
        Ok(())
    }

    async fn read(&self, segment: u32, offset: u64, bytes: usize) -> Result<DmaRead, DeviceError> {
        assert!(offset as usize % BLOCK_BYTES == 0 && bytes % BLOCK_BYTES == 0);
        let (file, position) = self.locate(segment, offset);
        let result = file
            .read_at_aligned(position, bytes)
            .await
            .map_err(|e| error("read", segment, offset, e))?;
        if result.len() != bytes {
            return Err(error(
                "read",
                segment,
                offset,
                format!("short read: {} of {bytes} bytes", result.len()),
            ));
        }
        Ok(DmaRead(result))
    }
}
