//! The I/O interface the journal is written against: a fixed set of equal
//! segments, written and read in whole aligned blocks. Implemented by files
//! in a directory and by a raw block device (both O_DIRECT, via glommio), and
//! by the in-memory fault-injecting disk the property tests use.

use std::future::Future;

/// An I/O error from a device. The journal stops accepting writes after one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{operation} segment {segment} at offset {offset}: {message}")]
pub struct DeviceError {
    pub operation: &'static str,
    pub segment: u32,
    pub offset: u64,
    pub message: String,
}

/// A block-aligned buffer a device can write from and read into.
pub trait IoBuffer: 'static {
    fn bytes(&self) -> &[u8];
    fn bytes_mut(&mut self) -> &mut [u8];
    /// Shortens the buffer to `len` bytes (a multiple of the block size).
    fn truncate(&mut self, len: usize);
}

pub trait Device {
    type Buffer: IoBuffer;
    type ReadBuffer: AsRef<[u8]> + 'static;

    /// A buffer of `bytes` (a multiple of the block size). Its contents are
    /// unspecified: the caller writes every byte it sends.
    fn allocate(&self, bytes: usize) -> Self::Buffer;
    fn segment_count(&self) -> u32;
    fn segment_bytes(&self) -> u64;
    /// How errors name a segment (a file name, or a region of a device).
    fn segment_name(&self, segment: u32) -> String {
        format!("segment {segment}")
    }

    /// Writes the whole buffer at `offset` of `segment`. With `durable`, the
    /// data is on stable storage when this completes (fdatasync or O_DSYNC).
    fn write(
        &self,
        segment: u32,
        offset: u64,
        buffer: Self::Buffer,
        durable: bool,
    ) -> impl Future<Output = Result<(), DeviceError>>;

    /// Reads `bytes` at `offset` of `segment`.
    fn read(
        &self,
        segment: u32,
        offset: u64,
        bytes: usize,
    ) -> impl Future<Output = Result<Self::ReadBuffer, DeviceError>>;
}

/// A plain heap buffer (the in-memory device's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeapBuffer(pub Vec<u8>);

impl AsRef<[u8]> for HeapBuffer {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl IoBuffer for HeapBuffer {
    fn bytes(&self) -> &[u8] {
        &self.0
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.0
    }

    fn truncate(&mut self, len: usize) {
        assert!(len <= self.0.len());
        self.0.truncate(len);
    }
}
