//! Read-only views of a store for `tern storage check`: a stream's block
//! store files (`StoreFiles`) and a journal's segments (`Device`) through
//! plain positioned reads. Writing, creating, renaming and removing fail,
//! so whatever runs on them (salvage, verify, journal inspection) cannot
//! change the store; a part that is missing reads as zeros, so a journal
//! can be inspected as it will read once its missing or shortened segment
//! files are recreated (what `repair` would do), without recreating them.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use tern_storage::block_store::{StoreFile, StoreFiles};
use tern_storage::dma::segment_path;
use tern_storage::format::BLOCK_BYTES;
use tern_storage::{Device, DeviceError, HeapBuffer};

fn refused(operation: &'static str, name: &str) -> DeviceError {
    DeviceError {
        operation,
        segment: 0,
        offset: 0,
        message: format!("{name}: the check is read-only"),
    }
}

fn failed(operation: &'static str, segment: u32, offset: u64, message: String) -> DeviceError {
    DeviceError {
        operation,
        segment,
        offset,
        message,
    }
}

/// Reads `bytes` at `offset` of `file`, fewer at its end.
fn read_at(file: &File, offset: u64, bytes: usize) -> std::io::Result<Vec<u8>> {
    let mut buffer = vec![0u8; bytes];
    let mut filled = 0;
    while filled < bytes {
        match file.read_at(&mut buffer[filled..], offset + filled as u64) {
            Ok(0) => break,
            Ok(read) => filled += read,
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    buffer.truncate(filled);
    Ok(buffer)
}

/// A directory of block store files, read only.
#[derive(Debug, Clone)]
pub(super) struct ReadOnlyFiles {
    directory: PathBuf,
}

pub(super) struct ReadOnlyFile {
    name: String,
    file: File,
    size: u64,
}

impl ReadOnlyFiles {
    /// A missing directory holds no files (it is not created).
    pub(super) fn new(directory: &Path) -> ReadOnlyFiles {
        ReadOnlyFiles {
            directory: directory.to_path_buf(),
        }
    }
}

impl StoreFiles for ReadOnlyFiles {
    type File = ReadOnlyFile;

    /// As `DmaFiles::names`: regular files, not hidden, sorted.
    fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&self.directory)
            .map(|entries| {
                entries
                    .filter_map(|entry| entry.ok())
                    .filter(|entry| entry.file_type().is_ok_and(|kind| kind.is_file()))
                    .filter_map(|entry| entry.file_name().into_string().ok())
                    .filter(|name| !name.starts_with('.'))
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }

    async fn create(&self, name: &str) -> Result<ReadOnlyFile, DeviceError> {
        Err(refused("create", name))
    }

    async fn open(&self, name: &str) -> Result<ReadOnlyFile, DeviceError> {
        let path = self.directory.join(name);
        let file = File::open(&path)
            .map_err(|error| failed("open", 0, 0, format!("{}: {error}", path.display())))?;
        let size = file
            .metadata()
            .map_err(|error| failed("stat", 0, 0, format!("{}: {error}", path.display())))?
            .len();
        Ok(ReadOnlyFile {
            name: name.to_string(),
            file,
            size,
        })
    }

    async fn remove(&self, name: &str) -> Result<(), DeviceError> {
        Err(refused("remove", name))
    }

    async fn rename(&self, from: &str, _to: &str) -> Result<(), DeviceError> {
        Err(refused("rename", from))
    }

    async fn sync_directory(&self) -> Result<(), DeviceError> {
        Err(refused(
            "sync directory",
            &self.directory.display().to_string(),
        ))
    }
}

impl StoreFile for ReadOnlyFile {
    type Buffer = HeapBuffer;
    type ReadBuffer = HeapBuffer;

    fn name(&self) -> &str {
        &self.name
    }

    fn allocate(&self, bytes: usize) -> HeapBuffer {
        HeapBuffer(vec![0u8; bytes])
    }

    fn size(&self) -> u64 {
        self.size
    }

    async fn write(&self, _offset: u64, _buffer: HeapBuffer) -> Result<(), DeviceError> {
        Err(refused("write", &self.name))
    }

    async fn read(&self, offset: u64, bytes: usize) -> Result<HeapBuffer, DeviceError> {
        // What O_DIRECT requires of the real files.
        assert!(offset as usize % BLOCK_BYTES == 0 && bytes % BLOCK_BYTES == 0);
        read_at(&self.file, offset, bytes)
            .map(HeapBuffer)
            .map_err(|error| failed("read", 0, offset, format!("{}: {error}", self.name)))
    }

    async fn sync(&self) -> Result<(), DeviceError> {
        Err(refused("sync", &self.name))
    }
}

/// A journal directory's segments as they will read once every segment
/// file is there at full size: a missing file, or the part of a short one
/// past its end, reads as zeros (what the repair writes there); bytes past
/// the segment size in a longer file are not part of the segment.
pub(super) struct SegmentImages {
    files: Vec<Option<File>>,
    segment_bytes: u64,
}

impl SegmentImages {
    pub(super) fn open(
        directory: &Path,
        segment_count: u32,
        segment_bytes: u64,
    ) -> Result<SegmentImages, DeviceError> {
        let mut files = Vec::with_capacity(segment_count as usize);
        for segment in 0..segment_count {
            let path = segment_path(directory, segment);
            let file = match File::open(&path) {
                Ok(file) => Some(file),
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => None,
                Err(error) => {
                    return Err(failed(
                        "open",
                        segment,
                        0,
                        format!("{}: {error}", path.display()),
                    ))
                }
            };
            files.push(file);
        }
        Ok(SegmentImages {
            files,
            segment_bytes,
        })
    }
}

impl Device for SegmentImages {
    type Buffer = HeapBuffer;
    type ReadBuffer = HeapBuffer;

    fn allocate(&self, bytes: usize) -> HeapBuffer {
        HeapBuffer(vec![0u8; bytes])
    }

    fn segment_count(&self) -> u32 {
        self.files.len() as u32
    }

    fn segment_bytes(&self) -> u64 {
        self.segment_bytes
    }

    fn segment_name(&self, segment: u32) -> String {
        tern_storage::dma::segment_file_name(segment)
    }

    async fn write(
        &self,
        segment: u32,
        offset: u64,
        _buffer: HeapBuffer,
        _durable: bool,
    ) -> Result<(), DeviceError> {
        Err(DeviceError {
            segment,
            offset,
            ..refused("write", &self.segment_name(segment))
        })
    }

    async fn read(
        &self,
        segment: u32,
        offset: u64,
        bytes: usize,
    ) -> Result<HeapBuffer, DeviceError> {
        assert!(offset + bytes as u64 <= self.segment_bytes);
        let mut image = match &self.files[segment as usize] {
            Some(file) => read_at(file, offset, bytes).map_err(|error| {
                failed(
                    "read",
                    segment,
                    offset,
                    format!("{}: {error}", self.segment_name(segment)),
                )
            })?,
            None => Vec::new(),
        };
        image.resize(bytes, 0);
        Ok(HeapBuffer(image))
    }
}
