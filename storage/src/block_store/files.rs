//! The files a stream's log lives in: an interface with two implementations,
//! O_DIRECT glommio files in a directory (real) and an in-memory set that
//! crashes like a disk (tests). Every write is whole 4096-byte blocks at an
//! aligned offset.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use glommio::io::{DmaFile, OpenOptions};

use crate::device::{DeviceError, HeapBuffer, IoBuffer};
use crate::dma::{o_direct_in_effect, DmaBuf, DmaRead};
use crate::format::BLOCK_BYTES;
use crate::memory::{surviving_sectors, Random};

fn error(operation: &'static str, name: &str, offset: u64, message: impl ToString) -> DeviceError {
    DeviceError {
        operation,
        segment: 0,
        offset,
        message: format!("{name}: {}", message.to_string()),
    }
}

pub trait StoreFile {
    type Buffer: IoBuffer;
    type ReadBuffer: AsRef<[u8]> + 'static;

    fn name(&self) -> &str;
    /// A buffer of `bytes` (a multiple of the block size), contents unspecified.
    fn allocate(&self, bytes: usize) -> Self::Buffer;
    /// Bytes in the file: a multiple of the block size, unless something
    /// outside the store truncated it (readers must not assume it).
    fn size(&self) -> u64;
    fn write(
        &self,
        offset: u64,
        buffer: Self::Buffer,
    ) -> impl Future<Output = Result<(), DeviceError>>;
    /// Reads up to `bytes` at `offset` (both multiples of the block size);
    /// fewer at the end of the file, not necessarily a multiple of the
    /// block size then.
    fn read(
        &self,
        offset: u64,
        bytes: usize,
    ) -> impl Future<Output = Result<Self::ReadBuffer, DeviceError>>;
    fn sync(&self) -> impl Future<Output = Result<(), DeviceError>>;
}

pub trait StoreFiles {
    type File: StoreFile + 'static;

    /// Names of the files present, sorted.
    fn names(&self) -> Vec<String>;
    /// Creates an empty file (replacing one of the same name).
    fn create(&self, name: &str) -> impl Future<Output = Result<Self::File, DeviceError>>;
    fn open(&self, name: &str) -> impl Future<Output = Result<Self::File, DeviceError>>;
    fn remove(&self, name: &str) -> impl Future<Output = Result<(), DeviceError>>;
    /// Atomically replaces `to` with `from`.
    fn rename(&self, from: &str, to: &str) -> impl Future<Output = Result<(), DeviceError>>;
    /// Makes creations, removals and renames durable.
    fn sync_directory(&self) -> impl Future<Output = Result<(), DeviceError>>;
}

// ----- O_DIRECT files ------------------------------------------------------

pub struct DmaFiles {
    directory: PathBuf,
}

pub struct DmaStoreFile {
    name: String,
    file: DmaFile,
    size: Cell<u64>,
}

impl DmaFiles {
    /// The directory, created if missing; O_DIRECT is probed first (see `dma`).
    pub async fn open(directory: &Path) -> Result<DmaFiles, DeviceError> {
        std::fs::create_dir_all(directory)
            .map_err(|e| error("create directory", &directory.display().to_string(), 0, e))?;
        crate::dma::probe_direct_io(directory).await?;
        Ok(DmaFiles {
            directory: directory.to_path_buf(),
        })
    }

    pub fn directory(&self) -> &Path {
        &self.directory
    }

    async fn open_file(&self, name: &str, create: bool) -> Result<DmaStoreFile, DeviceError> {
        let path = self.directory.join(name);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .truncate(create)
            .custom_flags(libc::O_DIRECT)
            .dma_open(&path)
            .await
            .map_err(|e| error("open", name, 0, e))?;
        let direct = o_direct_in_effect(std::os::fd::AsRawFd::as_raw_fd(&file))
            .map_err(|e| error("open", name, 0, e))?;
        if !direct {
            return Err(error("open", name, 0, "O_DIRECT is not in effect"));
        }
        let size = file
            .file_size()
            .await
            .map_err(|e| error("stat", name, 0, e))?;
        Ok(DmaStoreFile {
            name: name.to_string(),
            file,
            size: Cell::new(size),
        })
    }
}

impl StoreFile for DmaStoreFile {
    type Buffer = DmaBuf;
    type ReadBuffer = DmaRead;

    fn name(&self) -> &str {
        &self.name
    }

    fn allocate(&self, bytes: usize) -> DmaBuf {
        assert!(bytes % BLOCK_BYTES == 0);
        DmaBuf::allocate(bytes)
    }

    fn size(&self) -> u64 {
        self.size.get()
    }

    async fn write(&self, offset: u64, buffer: DmaBuf) -> Result<(), DeviceError> {
        let bytes = buffer.bytes().len();
        assert!(offset as usize % BLOCK_BYTES == 0 && bytes % BLOCK_BYTES == 0);
        let written = self
            .file
            .write_rc_at(Rc::new(buffer.into_inner()), offset)
            .await
            .map_err(|e| error("write", &self.name, offset, e))?;
        if written != bytes {
            return Err(error(
                "write",
                &self.name,
                offset,
                // What a full filesystem does before it says ENOSPC.
                format!("short write: {written} of {bytes} (is the filesystem full?)"),
            ));
        }
        self.size.set(self.size.get().max(offset + bytes as u64));
        Ok(())
    }

    async fn read(&self, offset: u64, bytes: usize) -> Result<DmaRead, DeviceError> {
        assert!(offset as usize % BLOCK_BYTES == 0 && bytes % BLOCK_BYTES == 0);
        let result = self
            .file
            .read_at_aligned(offset, bytes)
            .await
            .map_err(|e| error("read", &self.name, offset, e))?;
        Ok(DmaRead::new(result))
    }

    async fn sync(&self) -> Result<(), DeviceError> {
        self.file
            .fdatasync()
            .await
            .map_err(|e| error("fdatasync", &self.name, 0, e))
    }
}

impl StoreFiles for DmaFiles {
    type File = DmaStoreFile;

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

    async fn create(&self, name: &str) -> Result<DmaStoreFile, DeviceError> {
        self.open_file(name, true).await
    }

    async fn open(&self, name: &str) -> Result<DmaStoreFile, DeviceError> {
        self.open_file(name, false).await
    }

    async fn remove(&self, name: &str) -> Result<(), DeviceError> {
        std::fs::remove_file(self.directory.join(name)).map_err(|e| error("remove", name, 0, e))
    }

    async fn rename(&self, from: &str, to: &str) -> Result<(), DeviceError> {
        std::fs::rename(self.directory.join(from), self.directory.join(to))
            .map_err(|e| error("rename", from, 0, e))
    }

    async fn sync_directory(&self) -> Result<(), DeviceError> {
        let name = self.directory.display().to_string();
        let directory = glommio::io::Directory::open(&self.directory)
            .await
            .map_err(|e| error("open directory", &name, 0, e))?;
        directory
            .sync()
            .await
            .map_err(|e| error("sync directory", &name, 0, e))
    }
}

// ----- in memory -------------------------------------------------------------

#[derive(Default, Clone)]
struct MemoryFileState {
    durable: Vec<u8>,
    /// Writes not yet synced, in order: (offset, data).
    volatile: Vec<(u64, Vec<u8>)>,
}

impl MemoryFileState {
    /// The file's length as a read sees it (unsynced writes included).
    fn visible_len(&self) -> usize {
        self.volatile
            .iter()
            .map(|(offset, data)| *offset as usize + data.len())
            .fold(self.durable.len(), usize::max)
    }

    /// `[start, end)` of the file as a read sees it: the durable bytes with
    /// the unsynced writes laid over them in order. Costs the range, not
    /// the file (memory streams read through here).
    fn visible_range(&self, start: usize, end: usize) -> Vec<u8> {
        assert!(start <= end);
        let mut range = vec![0u8; end - start];
        let durable_end = self.durable.len().min(end);
        if start < durable_end {
            range[..durable_end - start].copy_from_slice(&self.durable[start..durable_end]);
        }
        for (offset, data) in &self.volatile {
            let (write_start, write_end) = (*offset as usize, *offset as usize + data.len());
            let (from, to) = (write_start.max(start), write_end.min(end));
            if from < to {
                range[from - start..to - start]
                    .copy_from_slice(&data[from - write_start..to - write_start]);
            }
        }
        range
    }

    /// Makes the unsynced writes durable, in place.
    fn apply_volatile(&mut self) {
        for (offset, data) in std::mem::take(&mut self.volatile) {
            let end = offset as usize + data.len();
            if self.durable.len() < end {
                self.durable.resize(end, 0);
            }
            self.durable[offset as usize..end].copy_from_slice(&data);
        }
    }

    fn visible(&self) -> Vec<u8> {
        let mut image = self.durable.clone();
        for (offset, data) in &self.volatile {
            let end = *offset as usize + data.len();
            if image.len() < end {
                image.resize(end, 0);
            }
            image[*offset as usize..end].copy_from_slice(data);
        }
        image
    }
}

#[derive(Default)]
struct MemoryFilesState {
    files: BTreeMap<String, Rc<RefCell<MemoryFileState>>>,
    writes: u64,
    reads: u64,
    /// `(offset, bytes)` of every read, in the order requested, once a test
    /// asked for it ([`MemoryFiles::record_reads`]): a memory stream reads
    /// through these files for as long as it lives.
    read_log: Option<Vec<(u64, usize)>>,
    die_at_write: Option<u64>,
    dead: bool,
}

/// In-memory files that crash like a disk: unsynced writes are kept, dropped
/// or torn at sector boundaries by [`MemoryFiles::crash`]. Directory changes
/// are durable at once (as with a journaling filesystem after `sync_directory`).
#[derive(Clone, Default)]
pub struct MemoryFiles {
    state: Rc<RefCell<MemoryFilesState>>,
}

pub struct MemoryStoreFile {
    name: String,
    state: Rc<RefCell<MemoryFileState>>,
    files: MemoryFiles,
}

impl MemoryFiles {
    pub fn new() -> MemoryFiles {
        MemoryFiles::default()
    }

    /// The process dies at the n-th write (counting from now): that write
    /// stays volatile and every later operation fails.
    pub fn die_after_writes(&self, writes: u64) {
        let mut state = self.state.borrow_mut();
        state.die_at_write = Some(state.writes + writes);
    }

    /// Reads served so far (tests count disk requests with it).
    pub fn reads(&self) -> u64 {
        self.state.borrow().reads
    }

    /// From now on, [`MemoryFiles::read_log`] records every read.
    pub fn record_reads(&self) {
        let mut state = self.state.borrow_mut();
        if state.read_log.is_none() {
            state.read_log = Some(Vec::new());
        }
    }

    /// `(offset, bytes)` of every read since [`MemoryFiles::record_reads`],
    /// in the order requested.
    pub fn read_log(&self) -> Vec<(u64, usize)> {
        self.state.borrow().read_log.clone().unwrap_or_default()
    }

    pub fn is_dead(&self) -> bool {
        self.state.borrow().dead
    }

    /// What a new process finds after a crash.
    pub fn crash(&self, seed: u64) -> MemoryFiles {
        let mut random = Random::new(seed);
        let state = self.state.borrow();
        let mut files = BTreeMap::new();
        for (name, file) in &state.files {
            let file = file.borrow();
            let mut image = file.durable.clone();
            for (offset, data) in &file.volatile {
                let kept = surviving_sectors(&mut random, data.len());
                let end = *offset as usize + kept;
                if kept > 0 {
                    if image.len() < end {
                        image.resize(end, 0);
                    }
                    image[*offset as usize..end].copy_from_slice(&data[..kept]);
                }
            }
            files.insert(
                name.clone(),
                Rc::new(RefCell::new(MemoryFileState {
                    durable: image,
                    volatile: Vec::new(),
                })),
            );
        }
        MemoryFiles {
            state: Rc::new(RefCell::new(MemoryFilesState {
                files,
                ..MemoryFilesState::default()
            })),
        }
    }

    /// Flips one bit of a file's stored bytes in `[from, to)`.
    pub fn flip_bit(&self, name: &str, from: u64, to: u64, seed: u64) -> u64 {
        let state = self.state.borrow();
        let mut file = state.files.get(name).expect("file exists").borrow_mut();
        let mut random = Random::new(seed);
        let offset = from + random.below(to - from);
        file.durable[offset as usize] ^= 1 << random.below(8);
        offset
    }

    /// Overwrites stored bytes (a misdirected write landing here).
    pub fn overwrite(&self, name: &str, offset: u64, bytes: &[u8]) {
        let state = self.state.borrow();
        let mut file = state.files.get(name).expect("file exists").borrow_mut();
        file.durable[offset as usize..offset as usize + bytes.len()].copy_from_slice(bytes);
    }

    /// Cuts a file to `bytes` (any size: damage from outside the store),
    /// as if every write to it had been synced first.
    pub fn truncate(&self, name: &str, bytes: u64) {
        let state = self.state.borrow();
        let mut file = state.files.get(name).expect("file exists").borrow_mut();
        let mut image = file.visible();
        image.truncate(bytes as usize);
        file.durable = image;
        file.volatile.clear();
    }

    /// A file's stored bytes.
    pub fn contents(&self, name: &str) -> Vec<u8> {
        self.state
            .borrow()
            .files
            .get(name)
            .expect("file exists")
            .borrow()
            .visible()
    }

    fn check_alive(&self, operation: &'static str, name: &str) -> Result<(), DeviceError> {
        if self.state.borrow().dead {
            return Err(error(operation, name, 0, "device is gone (process died)"));
        }
        Ok(())
    }
}

impl StoreFile for MemoryStoreFile {
    type Buffer = HeapBuffer;
    type ReadBuffer = HeapBuffer;

    fn name(&self) -> &str {
        &self.name
    }

    fn allocate(&self, bytes: usize) -> HeapBuffer {
        HeapBuffer(vec![0u8; bytes])
    }

    fn size(&self) -> u64 {
        self.state.borrow().visible_len() as u64
    }

    async fn write(&self, offset: u64, buffer: HeapBuffer) -> Result<(), DeviceError> {
        assert!(offset as usize % BLOCK_BYTES == 0 && buffer.0.len() % BLOCK_BYTES == 0);
        self.files.check_alive("write", &self.name)?;
        let mut files = self.files.state.borrow_mut();
        files.writes += 1;
        self.state.borrow_mut().volatile.push((offset, buffer.0));
        if files.die_at_write == Some(files.writes) {
            files.dead = true;
            return Err(error(
                "write",
                &self.name,
                offset,
                "process died during the write",
            ));
        }
        Ok(())
    }

    async fn read(&self, offset: u64, bytes: usize) -> Result<HeapBuffer, DeviceError> {
        // What O_DIRECT requires of the real files: tests catch an
        // unaligned read here rather than on a disk.
        assert!(offset as usize % BLOCK_BYTES == 0 && bytes % BLOCK_BYTES == 0);
        self.files.check_alive("read", &self.name)?;
        {
            let mut files = self.files.state.borrow_mut();
            files.reads += 1;
            if let Some(log) = files.read_log.as_mut() {
                log.push((offset, bytes));
            }
        }
        let state = self.state.borrow();
        let len = state.visible_len();
        let start = (offset as usize).min(len);
        let end = (start + bytes).min(len);
        Ok(HeapBuffer(state.visible_range(start, end)))
    }

    async fn sync(&self) -> Result<(), DeviceError> {
        self.files.check_alive("sync", &self.name)?;
        self.state.borrow_mut().apply_volatile();
        Ok(())
    }
}

impl StoreFiles for MemoryFiles {
    type File = MemoryStoreFile;

    fn names(&self) -> Vec<String> {
        self.state.borrow().files.keys().cloned().collect()
    }

    async fn create(&self, name: &str) -> Result<MemoryStoreFile, DeviceError> {
        self.check_alive("create", name)?;
        let file = Rc::new(RefCell::new(MemoryFileState::default()));
        self.state
            .borrow_mut()
            .files
            .insert(name.to_string(), file.clone());
        Ok(MemoryStoreFile {
            name: name.to_string(),
            state: file,
            files: self.clone(),
        })
    }

    async fn open(&self, name: &str) -> Result<MemoryStoreFile, DeviceError> {
        self.check_alive("open", name)?;
        let file = self
            .state
            .borrow()
            .files
            .get(name)
            .cloned()
            .ok_or_else(|| error("open", name, 0, "no such file"))?;
        Ok(MemoryStoreFile {
            name: name.to_string(),
            state: file,
            files: self.clone(),
        })
    }

    async fn remove(&self, name: &str) -> Result<(), DeviceError> {
        self.check_alive("remove", name)?;
        self.state.borrow_mut().files.remove(name);
        Ok(())
    }

    async fn rename(&self, from: &str, to: &str) -> Result<(), DeviceError> {
        self.check_alive("rename", from)?;
        let mut state = self.state.borrow_mut();
        let file = state
            .files
            .remove(from)
            .ok_or_else(|| error("rename", from, 0, "no such file"))?;
        state.files.insert(to.to_string(), file);
        Ok(())
    }

    async fn sync_directory(&self) -> Result<(), DeviceError> {
        self.check_alive("sync directory", "")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_lite::future::block_on;

    /// A read costs its range (memory streams read through these files),
    /// and sees what the whole-file image sees: unsynced writes over the
    /// durable bytes, in order, zeros in the gaps.
    #[test]
    fn a_read_of_a_range_sees_what_the_whole_image_sees() {
        let files = MemoryFiles::new();
        let file = block_on(files.create("segment")).unwrap();
        let mut random = Random::new(7);
        for step in 0..400u64 {
            let offset = random.below(64) * BLOCK_BYTES as u64;
            let blocks = 1 + random.below(4) as usize;
            let byte = (step % 251) as u8;
            block_on(file.write(offset, HeapBuffer(vec![byte; blocks * BLOCK_BYTES]))).unwrap();
            if random.below(5) == 0 {
                block_on(file.sync()).unwrap();
            }
            let image = file.state.borrow().visible();
            assert_eq!(file.size(), image.len() as u64);
            let start = random.below(70) as usize * BLOCK_BYTES;
            let bytes = (1 + random.below(8) as usize) * BLOCK_BYTES;
            let read = block_on(file.read(start as u64, bytes)).unwrap();
            let from = start.min(image.len());
            let to = (from + bytes).min(image.len());
            assert_eq!(
                read.0,
                image[from..to],
                "step {step}: {bytes} bytes at {start}"
            );
        }
    }
}
